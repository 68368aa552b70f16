package dtype

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// These tests check the conversions against definitions that share no code
// with them; golden_test.go checks them against torch.

func f32(u uint32) float32 { return math.Float32frombits(u) }

func TestRoundTrip16(t *testing.T) {
	for i := range 1 << 16 {
		h := uint16(i)
		isNaN16 := h&0x7FFF > 0x7C00
		if got, want := F32ToF16(F16ToF32(h)), h; isNaN16 {
			if want |= 0x0200; got != want { // NaN comes back quiet
				t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x, want %#04x", h, got, want)
			}
		} else if got != want {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, got)
		}
		b := h
		if got := F32ToBF16(BF16ToF32(b)); b&0x7FFF > 0x7F80 {
			if got != BFloat16NaN {
				t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x, want 0x7fc0", b, got)
			}
		} else if got != b {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", b, got)
		}
	}
	for i := range 256 {
		v := uint8(i)
		if got := F32ToE4M3FN(E4M3FNToF32(v)); got != v {
			t.Errorf("F32ToE4M3FN(E4M3FNToF32(%#02x)) = %#02x", v, got)
		}
		want := v
		if v&0x7F > 0x7C {
			want = v | 0x7F // every e5m2 NaN narrows back to 0x7F|sign
		}
		if got := F32ToE5M2(E5M2ToF32(v)); got != want {
			t.Errorf("F32ToE5M2(E5M2ToF32(%#02x)) = %#02x, want %#02x", v, got, want)
		}
	}
}

// TestWidenIsExactValue checks the widening conversions against the format
// definitions: (-1)^s × 2^(e-bias) × (1 + m/2^mbits), subnormals with e = 1.
func TestWidenIsExactValue(t *testing.T) {
	type format struct {
		name        string
		bits        uint // total width
		mbits, bias int
		widen       func(uint32) float32
		special     func(uint32) bool // NaN or Inf encodings, checked elsewhere
	}
	formats := []format{
		{"f16", 16, 10, 15, func(u uint32) float32 { return F16ToF32(uint16(u)) }, func(u uint32) bool { return u&0x7C00 == 0x7C00 }},
		{"bf16", 16, 7, 127, func(u uint32) float32 { return BF16ToF32(uint16(u)) }, func(u uint32) bool { return u&0x7F80 == 0x7F80 }},
		{"e4m3fn", 8, 3, 7, func(u uint32) float32 { return E4M3FNToF32(uint8(u)) }, func(u uint32) bool { return u&0x7F == 0x7F }},
		{"e5m2", 8, 2, 15, func(u uint32) float32 { return E5M2ToF32(uint8(u)) }, func(u uint32) bool { return u&0x7C == 0x7C }},
	}
	for _, f := range formats {
		for u := uint32(0); u < 1<<f.bits; u++ {
			if f.special(u) {
				continue
			}
			sign := u >> (f.bits - 1)
			e := int(u>>f.mbits) & (1<<(int(f.bits)-1-f.mbits) - 1)
			m := float64(u & (1<<f.mbits - 1))
			var v float64
			if e == 0 {
				v = math.Ldexp(m, 1-f.bias-f.mbits)
			} else {
				v = math.Ldexp(1+m/float64(int(1)<<f.mbits), e-f.bias)
			}
			if sign == 1 {
				v = -v
			}
			got := f.widen(u)
			if math.Float32bits(got) != math.Float32bits(float32(v)) {
				t.Fatalf("%s %#x: got %g (%#08x), want %g", f.name, u, got, math.Float32bits(got), v)
			}
		}
	}
	// Special encodings.
	for _, c := range []struct {
		got  float32
		want uint32
	}{
		{F16ToF32(0x7C00), 0x7F800000}, {F16ToF32(0xFC00), 0xFF800000},
		{F16ToF32(0x7C01), 0x7FC02000}, {F16ToF32(0xFDFF), 0xFFFFE000},
		{BF16ToF32(0x7F81), 0x7F810000}, // widening bf16 keeps even a signalling NaN
		{E4M3FNToF32(0x7F), 0x7FF00000}, {E4M3FNToF32(0xFF), 0xFFF00000},
		{E5M2ToF32(0x7C), 0x7F800000}, {E5M2ToF32(0xFD), 0xFFE00000},
	} {
		if math.Float32bits(c.got) != c.want {
			t.Errorf("got %#08x, want %#08x", math.Float32bits(c.got), c.want)
		}
	}
}

// nearestEven is a slow reference narrowing: it rounds x to the nearest entry
// of the sorted finite non-negative encodings of a format, ties to the even
// encoding. Values at or beyond the overflow threshold (halfway between the
// largest finite value and the next power of two) return overflow.
type narrowRef struct {
	vals     []float64 // ascending; vals[i] is the value of encoding encs[i]
	encs     []uint32
	limit    float64 // next power of two above the largest finite value
	overflow uint32  // encoding for |x| past the rounding range
	signBit  uint32
	nan      func(x uint32) uint32
}

func newNarrowRef(bits uint, widen func(uint32) float32, limit float64, overflow uint32, nan func(uint32) uint32) *narrowRef {
	r := &narrowRef{limit: limit, overflow: overflow, signBit: 1 << (bits - 1), nan: nan}
	for u := uint32(0); u < r.signBit; u++ {
		v := float64(widen(u))
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			r.vals = append(r.vals, v)
			r.encs = append(r.encs, u)
		}
	}
	sort.Sort(byVal{r})
	return r
}

type byVal struct{ r *narrowRef }

func (b byVal) Len() int           { return len(b.r.vals) }
func (b byVal) Less(i, j int) bool { return b.r.vals[i] < b.r.vals[j] }
func (b byVal) Swap(i, j int) {
	b.r.vals[i], b.r.vals[j] = b.r.vals[j], b.r.vals[i]
	b.r.encs[i], b.r.encs[j] = b.r.encs[j], b.r.encs[i]
}

func (r *narrowRef) narrow(xb uint32) uint32 {
	x := float64(f32(xb))
	if math.IsNaN(x) {
		return r.nan(xb)
	}
	var sign uint32
	if xb>>31 != 0 {
		sign = r.signBit
	}
	a := math.Abs(x)
	n := len(r.vals)
	top := r.vals[n-1]
	if a >= top {
		// Between the largest finite value and limit, RNE picks whichever is
		// nearer; the tie goes to limit, whose encoding has an even mantissa,
		// exactly when the largest finite value has an odd one.
		mid := (top + r.limit) / 2
		if a > mid || (a == mid && r.encs[n-1]&1 == 1) {
			return sign | r.overflow
		}
		return sign | r.encs[n-1]
	}
	i := sort.SearchFloat64s(r.vals, a) // vals[i-1] < a <= vals[i]
	if r.vals[i] == a {
		return sign | r.encs[i]
	}
	lo, hi := i-1, i
	dlo, dhi := a-r.vals[lo], r.vals[hi]-a
	switch {
	case dlo < dhi:
		return sign | r.encs[lo]
	case dhi < dlo:
		return sign | r.encs[hi]
	case r.encs[lo]&1 == 0:
		return sign | r.encs[lo]
	default:
		return sign | r.encs[hi]
	}
}

func TestNarrowAgainstNearestEven(t *testing.T) {
	refs := []struct {
		name   string
		ref    *narrowRef
		narrow func(float32) uint32
	}{
		{"f16", newNarrowRef(16, func(u uint32) float32 { return F16ToF32(uint16(u)) }, 65536, 0x7C00,
			func(x uint32) uint32 { return x>>16&0x8000 | 0x7E00 | x>>13&0x3FF }),
			func(f float32) uint32 { return uint32(F32ToF16(f)) }},
		{"bf16", newNarrowRef(16, func(u uint32) float32 { return BF16ToF32(uint16(u)) }, 0x1p128, 0x7F80,
			func(uint32) uint32 { return 0x7FC0 }),
			func(f float32) uint32 { return uint32(F32ToBF16(f)) }},
		// e4m3fn saturates: the "overflow" encoding is the largest finite one.
		{"e4m3fn", newNarrowRef(8, func(u uint32) float32 { return E4M3FNToF32(uint8(u)) }, 512, 0x7E,
			func(x uint32) uint32 { return x>>24&0x80 | 0x7F }),
			func(f float32) uint32 { return uint32(F32ToE4M3FN(f)) }},
		{"e5m2", newNarrowRef(8, func(u uint32) float32 { return E5M2ToF32(uint8(u)) }, 65536, 0x7C,
			func(x uint32) uint32 { return x>>24&0x80 | 0x7F }),
			func(f float32) uint32 { return uint32(F32ToE5M2(f)) }},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([]uint32, 0, 1<<20)
	for hi := range uint32(1 << 16) {
		for _, lo := range []uint32{0, 1, 0x0FFF, 0x1000, 0x1001, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF} {
			inputs = append(inputs, hi<<16|lo)
		}
	}
	for range 1 << 18 {
		inputs = append(inputs, rng.Uint32())
	}
	for _, r := range refs {
		bad := 0
		for _, x := range inputs {
			if got, want := r.narrow(f32(x)), r.ref.narrow(x); got != want {
				t.Errorf("%s(%#08x = %g) = %#x, want %#x", r.name, x, f32(x), got, want)
				if bad++; bad > 10 {
					t.FailNow()
				}
			}
		}
	}
}

// PutFloat32 stores each float type's rounding of the value at the element's
// offset, and refuses the other types.
func TestPutFloat32(t *testing.T) {
	const f = float32(-1.7)
	for _, c := range []struct {
		d    DType
		want []byte
	}{
		{Float32, binary.LittleEndian.AppendUint32(nil, math.Float32bits(f))},
		{BFloat16, binary.LittleEndian.AppendUint16(nil, F32ToBF16(f))},
		{Float16, binary.LittleEndian.AppendUint16(nil, F32ToF16(f))},
		{Float8E4M3FN, []byte{F32ToE4M3FN(f)}},
		{Float8E5M2, []byte{F32ToE5M2(f)}},
	} {
		b := make([]byte, 3*c.d.Size())
		if !PutFloat32(c.d, b, 1, f) {
			t.Fatalf("%v: refused", c.d)
		}
		if want := append(append(make([]byte, c.d.Size()), c.want...), make([]byte, c.d.Size())...); !bytes.Equal(b, want) {
			t.Fatalf("%v: got % x, want % x", c.d, b, want)
		}
	}
	for _, d := range []DType{Float64, Int32, Bool} {
		b := make([]byte, 8)
		if PutFloat32(d, b, 0, f) || !bytes.Equal(b, make([]byte, 8)) {
			t.Fatalf("%v: stored", d)
		}
	}
}
