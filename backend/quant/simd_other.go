//go:build !amd64 || purego

package quant

import "github.com/zipccl/zipccl/backend/dtype"

var useAVX2 = false

func absMax16(src []byte) uint16 { return absMax16Go(src) }

func absMax32(src []byte) uint32 { return absMax32Go(src) }

func quantSIMD(dtype.DType, Mode, []byte, []byte, float32) int { return 0 }

func accSIMD(Mode, []float32, []byte, float32, bool) int { return 0 }
