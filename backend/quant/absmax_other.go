//go:build !amd64 || purego

package quant

var useAVX2 = false

func absMax16(src []byte) uint16 { return absMax16Go(src) }
