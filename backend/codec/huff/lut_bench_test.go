package huff

import "testing"

func BenchmarkBuildLUT(b *testing.B) {
	s := gaussExp(65536, 0.02, 3)
	var e Encoder
	rec := e.AppendBlock(nil, s)
	var d Decoder
	if _, err := parseTable(rec[1:], &d.t); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		d.buildLUT()
	}
}
