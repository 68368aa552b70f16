package codec

import (
	"math/rand/v2"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/elems"
)

var codedTypes = []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32, dtype.Float8E4M3FN, dtype.Float8E5M2}
var allKinds = []Kind{Raw, Zip3, Huff, Huff2, Huff2Packed, Auto}

// fromF64 converts float64 values to the bytes of dt.
func fromF64(dt dtype.DType, v []float64) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		if !dtype.PutFloat32(dt, b, i, float32(x)) {
			panic("fromF64: " + dt.String())
		}
	}
	return b
}

func gauss(dt dtype.DType, n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64() * sigma
	}
	return fromF64(dt, v)
}

func uniform(dt dtype.DType, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 98))
	v := make([]float64, n)
	for i := range v {
		v[i] = 2*r.Float64() - 1
	}
	return fromF64(dt, v)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 97))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// specials: +-0, +-Inf, NaNs with payloads, subnormals, max, and every
// exponent field value with random sign and mantissa, repeated to n elements.
func specials(dt dtype.DType, n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 96))
	size := dt.Size()
	var pats []uint32
	switch dt {
	case dtype.Float32:
		pats = []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x00000001, 0x807fffff, 0x7f7fffff}
		for e := uint32(0); e < 256; e++ {
			pats = append(pats, e<<23|r.Uint32()&0x807fffff)
		}
	case dtype.BFloat16:
		pats = []uint32{0, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffff, 0x0001, 0x807f, 0x7f7f}
		for e := uint32(0); e < 256; e++ {
			pats = append(pats, e<<7|r.Uint32()&0x807f)
		}
	case dtype.Float16:
		pats = []uint32{0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xffff, 0x0001, 0x83ff, 0x7bff}
		for e := uint32(0); e < 32; e++ {
			pats = append(pats, e<<10|r.Uint32()&0x83ff)
		}
	default:
		for v := uint32(0); v < 256; v++ {
			pats = append(pats, v)
		}
	}
	b := make([]byte, n*size)
	for i := 0; i < n; i++ {
		elems.Store(b, size, i, uint64(pats[r.IntN(len(pats))]))
	}
	return b
}

func constant(dt dtype.DType, n int, x float64) []byte {
	v := make([]float64, n)
	for i := range v {
		v[i] = x
	}
	return fromF64(dt, v)
}
