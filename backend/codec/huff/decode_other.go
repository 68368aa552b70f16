//go:build !amd64 || purego

package huff

// useQuad is false: there is no four-stream kernel here.
var useQuad = false

// decodeQuad is never called (useQuad is false).
func (d *Decoder) decodeQuad(out, src []byte, starts *[5]int) error {
	panic("huff: no four-stream kernel")
}
