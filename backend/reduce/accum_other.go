//go:build !amd64 || purego

package reduce

import "github.com/zipccl/zipccl/backend/dtype"

// No SIMD float32-accumulation routines in this build.

func accumInitSIMD(dtype.DType, Op, []float32, []byte, []byte) int   { return 0 }
func accumSIMD(dtype.DType, Op, []float32, []byte) int               { return 0 }
func accumFinishSIMD(dtype.DType, Op, []byte, []float32, []byte) int { return 0 }
func narrowSIMD(dtype.DType, []byte, []float32) int                  { return 0 }
func widenSIMD(dtype.DType, []float32, []byte) int                   { return 0 }
