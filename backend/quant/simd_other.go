//go:build !amd64 || purego

package quant

import "github.com/zipccl/zipccl/backend/dtype"

var useAVX2 = false

func absMax16(src []byte) uint16 { return absMax16Go(src) }

func absMax32(src []byte) uint32 { return absMax32Go(src) }

func quantSIMD(dtype.DType, Mode, []byte, []byte, float32) int { return 0 }

func accSIMD(Mode, []float32, []byte, float32, bool) int { return 0 }

// The fp8 routines never run here (useAVX2 is false).

func fp8EncodeSIMD(dtype.DType, []float32, []float32, []byte) (float32, uint32) {
	panic("quant: no SIMD")
}

func e4m3SIMD([]byte, []float32, float32) int { return 0 }

func fp8DecodeSIMD([]float32, []byte) { panic("quant: no SIMD") }

func fp8NarrowSIMD(dtype.DType, []byte, []float32, float32) int { return 0 }

func fp8ScaleSIMD([]float32, []float32, float32, bool) int { return 0 }
