package codec

import (
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
		dtype.PutFloat32(dt, b, i, float32(rng.NormFloat64()*scale))
	}
	return b
}
