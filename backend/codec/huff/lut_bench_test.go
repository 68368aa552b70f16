package huff

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkBuildLUT(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	wide := make([]byte, 65536) // 40 values about equally likely: codes of 5 and 6 bits
	for i := range wide {
		wide[i] = byte(60 + r.IntN(40))
	}
	for name, s := range map[string][]byte{"exponents": gaussExp(65536, 0.02, 3), "wide": wide} {
		var e Encoder
		rec := e.AppendExact(nil, s, 0)
		var d Decoder
		if _, err := parseTable(rec[1:], &d.t); err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				d.buildLUT()
			}
		})
		// the fill alone, by the lookups after the first it makes
		d.buildLUT()
		for more := 0; more <= 3; more++ {
			b.Run(fmt.Sprintf("%s/fill/more=%d", name, more), func(b *testing.B) {
				for b.Loop() {
					if useLUTAsm {
						fillLUTAVX2(&d.lut, &d.multi, more)
					} else {
						fillLUT(&d.lut, &d.multi, more)
					}
				}
			})
		}
	}
}
