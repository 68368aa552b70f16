package huff

import "testing"

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
