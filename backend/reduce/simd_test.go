package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// simdCases lists the (dtype, op) pairs that have a SIMD routine at some
// level on this machine.
func simdCases() (cases [][2]uint8) {
	defer func() { curLevel = bestLevel }()
	for _, dt := range allDTypes {
		for _, op := range allOps {
			for l := levelAVX2; l <= maxLevel; l++ {
				curLevel = l
				if k, _ := simdKernel(dt, op); k != nil && Check(dt, op) == nil {
					cases = append(cases, [2]uint8{uint8(dt), uint8(op)})
					break
				}
			}
		}
	}
	return cases
}

// TestSIMDMatchesGeneric compares every SIMD routine with the portable kernel
// bit for bit, on random data with NaNs, infinities, subnormals and signed
// zeros, for lengths that exercise every loop and tail, with every aliasing
// form and with operands that are element- but not vector-aligned.
func TestSIMDMatchesGeneric(t *testing.T) {
	if maxLevel == levelGeneric {
		t.Skip("no SIMD routines on this machine/build")
	}
	cases := simdCases()
	if len(cases) == 0 {
		t.Fatal("no SIMD cases found")
	}
	ns := []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 1000003}
	rng := rand.New(rand.NewPCG(4, 4))
	for _, c := range cases {
		dt, op := dtype.DType(c[0]), Op(c[1])
		for _, n := range ns {
			size := dt.Size()
			// One extra element at each end lets the operands start at an
			// element offset and detects writes past the end.
			a, b := fill(rng, dt, n+2), fill(rng, dt, n+2)
			skews := []int{0, 1}
			if n > 1000 {
				skews = skews[:1] // keeps -race runs short; small n cover the skew
			}
			for _, skew := range skews {
				xa, xb := a[skew*size:][:n*size], b[(1-skew)*size:][:n*size]
				curLevel = levelGeneric
				want := make([]byte, len(xa))
				Reduce3(dt, op, want, xa, xb)
				for l := levelAVX2; l <= maxLevel; l++ {
					curLevel = l
					name := fmt.Sprintf("%s/%s/%s/n=%d/skew=%d", levelNames[l], dt, op, n, skew)
					buf := make([]byte, len(xa)+2*size)
					got := buf[size : size+len(xa)]
					Reduce3(dt, op, got, xa, xb)
					checkEqual(t, name, dt, got, want, xa, xb)
					if !bytes.Equal(buf[:size], make([]byte, size)) || !bytes.Equal(buf[size+len(xa):], make([]byte, size)) {
						t.Fatalf("%s: wrote outside dst", name)
					}
					if n > 1000 {
						continue // aliasing is length-independent
					}
					x := bytes.Clone(xa)
					Reduce(dt, op, x, xb)
					checkEqual(t, name+" dst=a", dt, x, want, xa, xb)
					y := bytes.Clone(xb)
					Reduce3(dt, op, y, xa, y)
					checkEqual(t, name+" dst=b", dt, y, want, xa, xb)
				}
				curLevel = bestLevel
			}
		}
	}
}

// TestSIMDExhaustive16 runs the bfloat16 and float16 sums over every 16-bit
// first operand, paired with every special value, with itself, its negation,
// its neighbour and a random partner, at every level, against the reference.
func TestSIMDExhaustive16(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		var as, bs []uint16
		rng := rand.New(rand.NewPCG(5, 5))
		partners := []func(a uint16) uint16{
			func(a uint16) uint16 { return a },
			func(a uint16) uint16 { return a ^ 0x8000 },
			func(a uint16) uint16 { return a + 1 },
			func(a uint16) uint16 { return a ^ 0x8001 },
			func(uint16) uint16 { return uint16(rng.Uint32()) },
		}
		for _, s := range specials[2] {
			partners = append(partners, func(uint16) uint16 { return uint16(s) })
		}
		for _, p := range partners {
			for a := range 1 << 16 {
				as = append(as, uint16(a))
				bs = append(bs, p(uint16(a)))
			}
		}
		a, b := u16bytes(as), u16bytes(bs)
		want := expect(dt, Sum, a, b)
		atLevels(t, func(t *testing.T, _ level) {
			got := make([]byte, len(a))
			Reduce3(dt, Sum, got, a, b)
			checkEqual(t, dt.String()+" sum", dt, got, want, a, b)
			// Swapped operands exercise the NaN rule from the other side.
			wantBA := expect(dt, Sum, b, a)
			Reduce3(dt, Sum, got, b, a)
			checkEqual(t, dt.String()+" sum swapped", dt, got, wantBA, b, a)
		})
	}
}

func u16bytes(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		store(b, 2, i, uint64(x))
	}
	return b
}

// TestF16Normal checks the inlined fast path of the float16 kernels against
// dtype.F32ToF16 around every rounding point of every exponent.
func TestF16Normal(t *testing.T) {
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x0FFF, 0x1000, 0x1001, 0x2FFF, 0x3000, 0x3001, 0xFFFF} {
			f := math.Float32frombits(hi<<16 | lo)
			if h, ok := f16Normal(f); ok {
				if want := dtype.F32ToF16(f); h != want {
					t.Fatalf("f16Normal(%#08x) = %#04x, want %#04x", hi<<16|lo, h, want)
				}
			} else if a := math.Abs(float64(f)); a >= 0x1p-14 && a < 65536 {
				t.Fatalf("f16Normal(%#08x) declined a normal-range value", hi<<16|lo)
			}
		}
	}
}
