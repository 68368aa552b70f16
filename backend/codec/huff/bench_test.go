package huff

import (
	"math"
	"math/rand/v2"
	"testing"
)

func BenchmarkEncode(b *testing.B) {
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	dst := make([]byte, 0, 1<<20)
	b.SetBytes(int64(2 * len(s))) // counted in bf16 bytes
	for i := 0; i < b.N; i++ {
		dst = e.AppendBlock(dst[:0], s)
	}
}

func BenchmarkEncodeNoReuse(b *testing.B) {
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	dst := make([]byte, 0, 1<<20)
	b.SetBytes(int64(2 * len(s)))
	for i := 0; i < b.N; i++ {
		e.Reset()
		dst = e.AppendBlock(dst[:0], s)
	}
}

func BenchmarkDecode(b *testing.B) {
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	rec := e.AppendBlock(nil, s)
	var d Decoder
	out := make([]byte, len(s))
	b.SetBytes(int64(2 * len(s)))
	for i := 0; i < b.N; i++ {
		if _, err := d.DecodeBlock(out, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeFP16Plane decodes huff2's float16 plane 0 (exact table,
// about 5.5 bits a symbol: the fewest symbols a lookup), one cached record.
func BenchmarkDecodeFP16Plane(b *testing.B) {
	s := fp16Plane(65536, 0.02, 3)
	var e Encoder
	rec := e.AppendExact(nil, s, 0)
	var d Decoder
	out := make([]byte, len(s))
	b.SetBytes(int64(2 * len(s))) // counted in float16 bytes
	for i := 0; i < b.N; i++ {
		if _, err := d.DecodeBlock(out, rec); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeNoCache(b *testing.B) {
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	rec := e.AppendBlock(nil, s)
	var d Decoder
	out := make([]byte, len(s))
	b.SetBytes(int64(2 * len(s)))
	for i := 0; i < b.N; i++ {
		d.keyLen = 0
		if _, err := d.DecodeBlock(out, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// fp16Plane returns the huff2 plane 0 of n float16 values N(0, sigma^2):
// bits 14..7 (5 exponent bits, 3 mantissa bits), mantissas truncated,
// values under float16's normal range flushed to 0.
func fp16Plane(n int, sigma float64, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]byte, n)
	for i := range out {
		b := math.Float32bits(float32(r.NormFloat64() * sigma))
		e := int(b>>23&0xff) - 127 + 15
		if e > 0 && e < 31 {
			out[i] = byte(e<<3 | int(b>>20&7))
		}
	}
	return out
}

// BenchmarkAppendExact codes huff2's float16 plane 0, its widest alphabet
// (about 5.5 bits a symbol), with exact tables.
func BenchmarkAppendExact(b *testing.B) {
	s := fp16Plane(65536, 0.02, 3)
	var e Encoder
	dst := make([]byte, 0, 1<<20)
	b.SetBytes(int64(2 * len(s))) // counted in float16 bytes
	for i := 0; i < b.N; i++ {
		dst = e.AppendExact(dst[:0], s, 0)
	}
}

func BenchmarkHistogram(b *testing.B) {
	s := fp16Plane(65536, 0.02, 3)
	var h [256]uint32
	for _, k := range []struct {
		name string
		fn   func(*[256]uint32, []byte)
	}{{"go", histogram}, {"kernel", histogramFn}} {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for i := 0; i < b.N; i++ {
				k.fn(&h, s)
			}
		})
	}
}
