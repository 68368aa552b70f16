package reduce

import "unsafe"

// view reinterprets b, which must be aligned for T and a whole number of Ts
// long, as a []T without copying.
func view[T any](b []byte) []T {
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b))/unsafe.Sizeof(zero))
}
