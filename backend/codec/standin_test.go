package codec

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/elems"
)

// StandIn is the same on every call, holds values of the documented scale
// for every coded dtype, and codes like weights do.
func TestStandIn(t *testing.T) {
	toF32 := map[dtype.DType]func(uint64) float32{
		dtype.Float32:      func(x uint64) float32 { return math.Float32frombits(uint32(x)) },
		dtype.BFloat16:     func(x uint64) float32 { return dtype.BF16ToF32(uint16(x)) },
		dtype.Float16:      func(x uint64) float32 { return dtype.F16ToF32(uint16(x)) },
		dtype.Float8E4M3FN: func(x uint64) float32 { return dtype.E4M3FNToF32(uint8(x)) },
		dtype.Float8E5M2:   func(x uint64) float32 { return dtype.E5M2ToF32(uint8(x)) },
	}
	for _, dt := range codedTypes {
		b := StandIn(dt, 1<<18+1)
		require.Len(t, b, (1<<18+1)/dt.Size()*dt.Size(), "%v", dt)
		require.Equal(t, b, StandIn(dt, 1<<18+1), "%v", dt)
		n := len(b) / dt.Size()
		var sq float64
		for i := range n {
			v := float64(toF32[dt](elems.Load(b, dt.Size(), i)))
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "%v element %d", dt, i)
			sq += v * v
		}
		want := 0.02
		if dt.Size() == 1 {
			want = 2
		}
		require.InEpsilon(t, want, math.Sqrt(sq/float64(n)), 0.05, "%v", dt)
		frame, err := NewEncoder().Encode(nil, b, dt, Huff)
		require.NoError(t, err)
		require.Greater(t, float64(len(b))/float64(len(frame)), 1.05, "%v: codes like weights", dt)
	}
}
