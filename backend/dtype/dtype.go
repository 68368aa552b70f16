// Package dtype describes the element types zipccl moves and reduces, and
// provides scalar conversions between float32 and the reduced-precision
// floating-point formats that reproduce PyTorch's CPU results bit for bit.
//
// The conversions are checked against torch 2.15 (testdata/gen_golden.py):
// exhaustively for the widening ones, and for all 2³² float32 inputs for the
// narrowing ones when ZIPCCL_EXHAUSTIVE=1 is set.
package dtype

import "strconv"

// DType identifies an element type. The numeric values are part of the C ABI
// shared with the PyTorch extension and must never change.
type DType uint8

// Element types. Values are fixed by the C ABI.
const (
	Invalid      DType = 0  // no type; the zero value
	Float32      DType = 1  // IEEE binary32
	Float64      DType = 2  // IEEE binary64
	BFloat16     DType = 3  // bfloat16 (upper half of a binary32)
	Float16      DType = 4  // IEEE binary16
	Int8         DType = 5  // signed 8-bit integer
	UInt8        DType = 6  // unsigned 8-bit integer
	Int16        DType = 7  // signed 16-bit integer
	Int32        DType = 8  // signed 32-bit integer
	Int64        DType = 9  // signed 64-bit integer
	Bool         DType = 10 // one byte, 0 = false, anything else = true
	Float8E4M3FN DType = 11 // OCP FP8 E4M3, finite-only (no infinities)
	Float8E5M2   DType = 12 // OCP FP8 E5M2
)

// numDTypes is one past the largest valid DType.
const numDTypes = 13

var sizes = [numDTypes]uint8{
	Float32: 4, Float64: 8, BFloat16: 2, Float16: 2,
	Int8: 1, UInt8: 1, Int16: 2, Int32: 4, Int64: 8, Bool: 1,
	Float8E4M3FN: 1, Float8E5M2: 1,
}

// names match torch.dtype's short names (str(torch.float32) minus "torch.").
var names = [numDTypes]string{
	Invalid: "invalid", Float32: "float32", Float64: "float64",
	BFloat16: "bfloat16", Float16: "float16", Int8: "int8", UInt8: "uint8",
	Int16: "int16", Int32: "int32", Int64: "int64", Bool: "bool",
	Float8E4M3FN: "float8_e4m3fn", Float8E5M2: "float8_e5m2",
}

// Valid reports whether d is one of the defined element types (not Invalid).
func (d DType) Valid() bool { return d != Invalid && d < numDTypes }

// Size returns the size of one element in bytes, or 0 if d is not Valid.
func (d DType) Size() int {
	if d >= numDTypes {
		return 0
	}
	return int(sizes[d])
}

// IsFloat reports whether d is a floating-point type (including bfloat16,
// float16 and the float8 formats).
func (d DType) IsFloat() bool {
	switch d {
	case Float32, Float64, BFloat16, Float16, Float8E4M3FN, Float8E5M2:
		return true
	}
	return false
}

// String returns the PyTorch name of d ("float32", "bfloat16", ...),
// "invalid" for Invalid and "DType(N)" for undefined values.
func (d DType) String() string {
	if d < numDTypes {
		return names[d]
	}
	return "DType(" + strconv.Itoa(int(d)) + ")"
}
