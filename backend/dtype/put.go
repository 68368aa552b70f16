package dtype

import (
	"encoding/binary"
	"math"
)

// PutFloat32 stores f, rounded to d as the conversions of this package do,
// as element i of b (little-endian). It reports false, storing nothing, if
// d is not one of the float types narrower than float64.
func PutFloat32(d DType, b []byte, i int, f float32) bool {
	switch d {
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	case BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], F32ToBF16(f))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], F32ToF16(f))
	case Float8E4M3FN:
		b[i] = F32ToE4M3FN(f)
	case Float8E5M2:
		b[i] = F32ToE5M2(f)
	default:
		return false
	}
	return true
}
