//go:build !amd64 || purego

package huff

// useQuad is false: there is no four-stream kernel here.
var useQuad = false

// decodeQuad is never called (useQuad is false).
func (d *Decoder) decodeQuad(out, src []byte, starts *[5]int) error {
	panic("huff: no four-stream kernel")
}

// useLUTAsm is false: there is no vector table fill here.
var useLUTAsm = false

func fillLUTAVX2(lut *[lutSize]uint64, m *[lutSize + 2]uint16, more int) {
	panic("huff: no vector table fill")
}
