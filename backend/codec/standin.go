package codec

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/zipccl/zipccl/backend/dtype"
)

// StandIn returns n bytes (rounded down to whole elements) of dt holding
// typical trained weights: N(0, 0.02^2), scaled by 100 for the float8
// types, whose tensors are scaled into their range. It is the same on every
// call. Engines time the codec on it where a rank's own data is too small
// to time, or absent.
func StandIn(dt dtype.DType, n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	scale := 0.02
	if dt.Size() == 1 {
		scale *= 100
	}
	b := make([]byte, n/dt.Size()*dt.Size())
	for i := range len(b) / dt.Size() {
		putFloat(dt, b, i, float32(rng.NormFloat64()*scale))
	}
	return b
}

// putFloat stores v, rounded to dt, as element i of b; false if dt is not
// one of the coded float types.
func putFloat(dt dtype.DType, b []byte, i int, v float32) bool {
	switch dt {
	case dtype.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(v))
	case dtype.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(v))
	case dtype.Float8E4M3FN:
		b[i] = dtype.F32ToE4M3FN(v)
	case dtype.Float8E5M2:
		b[i] = dtype.F32ToE5M2(v)
	default:
		return false
	}
	return true
}
