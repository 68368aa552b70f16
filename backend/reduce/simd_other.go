//go:build !amd64 || purego

package reduce

import "github.com/zipccl/zipccl/backend/dtype"

func detectLevels() (runnable, preferred level) { return levelGeneric, levelGeneric }

// simdKernel reports that there are no SIMD routines in this build.
func simdKernel(dtype.DType, Op) (k func(dst, a, b *byte, n int), block int) { return nil, 0 }
