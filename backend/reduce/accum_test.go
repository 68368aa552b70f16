package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

var accDTypes = []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float8E4M3FN, dtype.Float8E5M2}

// refAccumChain is the documented meaning of AccumInit, Accum... and
// AccumFinish over the contributions xs (len >= 2), one element at a time:
// float32 steps with the x86 NaN rule, one rounding at the end.
func refAccumChain(dt dtype.DType, op Op, xs [][]byte) []byte {
	size := dt.Size()
	n := len(xs[0]) / size
	out := make([]byte, len(xs[0]))
	f := add32
	if op == Product {
		f = mul32
	}
	for i := range n {
		acc := float32(widen(dt, load(xs[0], size, i)))
		for _, x := range xs[1:] {
			y := float32(widen(dt, load(x, size, i)))
			r := f(acc, y)
			if math.IsNaN(float64(r)) {
				r = refNaN32(acc, y)
			}
			acc = r
		}
		store(out, size, i, narrow32(dt, acc))
	}
	return out
}

// runAccumChain computes the chain with the kernels into dst.
func runAccumChain(dt dtype.DType, op Op, dst []byte, xs [][]byte) {
	acc := make([]float32, len(dst)/dt.Size())
	if len(xs) == 2 {
		Widen(dt, acc, xs[0])
	} else {
		AccumInit(dt, op, acc, xs[0], xs[1])
		for _, x := range xs[2 : len(xs)-1] {
			Accum(dt, op, acc, x)
		}
	}
	AccumFinish(dt, op, dst, acc, xs[len(xs)-1])
}

func TestAccumulable(t *testing.T) {
	for _, dt := range allDTypes {
		for _, op := range allOps {
			want := (op == Sum || op == Product || op == Avg || op == PreMulSum) &&
				(dt == dtype.BFloat16 || dt == dtype.Float16 || dt == dtype.Float8E4M3FN || dt == dtype.Float8E5M2)
			if got := Accumulable(dt, op); got != want {
				t.Errorf("Accumulable(%v, %v) = %v", dt, op, got)
			}
		}
	}
	mustPanic(t, "AccumInit float32", func() { AccumInit(dtype.Float32, Sum, make([]float32, 1), make([]byte, 4), make([]byte, 4)) })
	mustPanic(t, "Accum min", func() { Accum(dtype.BFloat16, Min, make([]float32, 1), make([]byte, 2)) })
	mustPanic(t, "AccumFinish short", func() { AccumFinish(dtype.BFloat16, Sum, make([]byte, 2), make([]float32, 2), make([]byte, 4)) })
	b := make([]byte, 8)
	mustPanic(t, "AccumFinish overlap", func() { AccumFinish(dtype.BFloat16, Sum, b[:4], make([]float32, 2), b[2:6]) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s: no panic", what)
		}
	}()
	f()
}

// TestAccumChain checks chains of 2..5 contributions against the reference
// at every SIMD level, for lengths that exercise the vector loops and the
// tails, with operands at odd byte offsets, and AccumFinish in place.
func TestAccumChain(t *testing.T) {
	ns := []int{0, 1, 7, 15, 16, 17, 31, 32, 33, 100, 1000, 4099}
	rng := rand.New(rand.NewPCG(11, 3))
	atLevels(t, func(t *testing.T, _ level) {
		for _, dt := range accDTypes {
			for _, op := range []Op{Sum, Product, Avg, PreMulSum} {
				for _, n := range ns {
					for parts := 2; parts <= 5; parts++ {
						size := dt.Size()
						xs := make([][]byte, parts)
						for i := range xs {
							// odd offsets: unaligned element buffers
							xs[i] = offset(fill(rng, dt, n), i%2)
						}
						name := fmt.Sprintf("%v/%v/n=%d/parts=%d", dt, op, n, parts)
						want := refAccumChain(dt, op, xs)
						buf := make([]byte, n*size+2*size)
						got := buf[size : size+n*size]
						runAccumChain(dt, op, got, xs)
						checkEqual(t, name, dt, got, want, xs[0], xs[1])
						if !bytes.Equal(buf[:size], make([]byte, size)) || !bytes.Equal(buf[size+n*size:], make([]byte, size)) {
							t.Fatalf("%s: wrote outside dst", name)
						}
						// AccumFinish in place over the last contribution.
						last := bytes.Clone(xs[parts-1])
						xs[parts-1] = last
						runAccumChain(dt, op, last, xs)
						checkEqual(t, name+" in place", dt, last, want, xs[0], xs[1])
						if parts == 2 {
							// two contributions are exactly Reduce3
							r := make([]byte, n*size)
							Reduce3(dt, op, r, xs[0], xs[1])
							w2 := refAccumChain(dt, op, [][]byte{xs[0], xs[1]})
							checkEqual(t, name+" vs Reduce3", dt, r, w2, xs[0], xs[1])
						}
					}
				}
			}
		}
	})
}

// TestAccumExhaustive16 runs init+finish over every 16-bit first operand,
// paired with special values and random partners, at every level.
func TestAccumExhaustive16(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		var as, bs, cs []uint16
		partners := []func(a uint16) uint16{
			func(a uint16) uint16 { return a },
			func(a uint16) uint16 { return a ^ 0x8000 },
			func(a uint16) uint16 { return a + 1 },
			func(uint16) uint16 { return uint16(rng.Uint32()) },
		}
		for _, s := range specials[2][:8] {
			partners = append(partners, func(uint16) uint16 { return uint16(s) })
		}
		for _, p := range partners {
			for a := range 1 << 16 {
				as = append(as, uint16(a))
				bs = append(bs, p(uint16(a)))
				cs = append(cs, uint16(rng.Uint32()))
			}
		}
		a, b, c := u16bytes(as), u16bytes(bs), u16bytes(cs)
		for _, op := range []Op{Sum, Product} {
			want3 := refAccumChain(dt, op, [][]byte{a, b, c})
			want3r := refAccumChain(dt, op, [][]byte{c, b, a})
			atLevels(t, func(t *testing.T, _ level) {
				got := make([]byte, len(a))
				runAccumChain(dt, op, got, [][]byte{a, b, c})
				checkEqual(t, dt.String()+" "+op.String(), dt, got, want3, a, b)
				runAccumChain(dt, op, got, [][]byte{c, b, a})
				checkEqual(t, dt.String()+" "+op.String()+" reversed", dt, got, want3r, c, b)
			})
		}
	}
}

func TestWidenNarrow(t *testing.T) {
	defer func() { curLevel = bestLevel }()
	for l := levelGeneric; l <= bestLevel; l++ {
		curLevel = l
		testWidenNarrow(t)
	}
}

func testWidenNarrow(t *testing.T) {
	// Narrow rounds any float32 (ties, NaN payloads, overflow) as narrow32
	rng := rand.New(rand.NewPCG(3, uint64(curLevel)))
	wide := make([]float32, 4099)
	for i := range wide {
		wide[i] = math.Float32frombits(rng.Uint32())
	}
	for _, dt := range accDTypes {
		got := make([]byte, len(wide)*dt.Size())
		Narrow(dt, got, wide)
		for i, v := range wide {
			if g, want := load(got, dt.Size(), i), narrow32(dt, v); g != want {
				t.Fatalf("%v at %s: Narrow(%#x) = %#x, want %#x", dt, levelNames[curLevel], math.Float32bits(v), g, want)
			}
		}
	}
	for _, dt := range accDTypes {
		size := dt.Size()
		n := 1 << (8 * size)
		src := make([]byte, n*size)
		for i := range n {
			store(src, size, i, uint64(i))
		}
		acc := make([]float32, n)
		Widen(dt, acc, src)
		back := make([]byte, len(src))
		Narrow(dt, back, acc)
		for i := range n {
			x := load(src, size, i)
			w := widen(dt, x)
			if g := acc[i]; math.Float32bits(g) != math.Float32bits(float32(w)) && !(math.IsNaN(w) && g != g) {
				t.Fatalf("%v: Widen(%#x) = %v, want %v", dt, x, g, w)
			}
			if g, want := load(back, size, i), narrow32(dt, acc[i]); g != want {
				t.Fatalf("%v: Narrow(%v) = %#x, want %#x", dt, acc[i], g, want)
			}
			if !math.IsNaN(w) && load(back, size, i) != x {
				t.Fatalf("%v: %#x does not round-trip", dt, x)
			}
		}
	}
}

func TestAccumNoAlloc(t *testing.T) {
	a, b := make([]byte, 2048), make([]byte, 2048)
	acc := make([]float32, 1024)
	allocs := testing.AllocsPerRun(10, func() {
		AccumInit(dtype.Float8E5M2, Sum, acc, a[:1024], b[:1024])
		Accum(dtype.BFloat16, Product, acc, a)
		AccumFinish(dtype.Float16, Sum, b, acc, a)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
}

// BenchmarkAccum measures the middle and final steps on 1 MiB of input.
// Throughput is per byte of the element-typed input.
//
//	go test -run '^$' -bench Accum ./backend/reduce/
func BenchmarkAccum(b *testing.B) {
	defer func() { curLevel = bestLevel }()
	const n = 1 << 20
	for _, dt := range accDTypes {
		rng := rand.New(rand.NewPCG(1, 2))
		src := benchData(rng, dt, n)
		acc := make([]float32, n/dt.Size())
		dst := make([]byte, n)
		for l := levelGeneric; l <= maxLevel; l++ {
			b.Run(fmt.Sprintf("%s/accum/%s", dt, levelNames[l]), func(b *testing.B) {
				curLevel = l
				b.SetBytes(n)
				for b.Loop() {
					Accum(dt, Sum, acc, src)
				}
			})
			b.Run(fmt.Sprintf("%s/finish/%s", dt, levelNames[l]), func(b *testing.B) {
				curLevel = l
				b.SetBytes(n)
				for b.Loop() {
					AccumFinish(dt, Sum, dst, acc, src)
				}
			})
		}
	}
}
