package quant

import (
	"math"

	"github.com/zipccl/zipccl/backend/dtype"
)

// TACO's fp8 mode (docs/FORMAT.md, "Lossy messages"). For a block of B
// elements x (a short last block padded with zeros to B), TACO sends
//
//	σ = sqrt(mean(x²) + ε)   α = τ/σ   z = H(αx)/√B
//	s = max|z| / 448          q = E4M3(z / s)
//
// with H the Walsh-Hadamard matrix (Sylvester order). α and 1/√B cancel
// in z/s: q = E4M3(u · 448/max|u|) with u = Hx, the unnormalised
// transform. zipccl codes it that way, so that no rounding of α or √B
// touches the codes: the codes and the scale are exactly independent of τ
// and ε, and coding 2^k·x gives the same codes (and 2^k·s). The scale on
// the wire is the unnormalised one, s = max|u|/448; decoding is
// x' = H(q)·(s/B). α travels as TACO's format has it (its decoder
// divides by it; this one needs no division). Every step is a float32 one,
// rounded to nearest even, in the order written here, which a CUDA block
// follows thread for thread, and the AVX2 path (fp8_amd64.s, chosen by
// useAVX2) operation for operation: its bytes are the portable code's.

// TACO's τ and ε: variables only so that a test can show that the codes
// and s do not depend on them.
var (
	fp8Tau float32 = 448
	fp8Eps float32 = 1e-6
)

const (
	fp8Max = 448 // E4M3's largest finite value, max|u|'s code
	// fp8Tiny: a block whose max|u| is below it (but not 0) travels
	// exact, so that the decode's s/B and its products stay normal
	// float32 numbers (2^-100, about 7.9e-31).
	fp8Tiny = 0x0D800000
)

// fp8Scratch is one block's float32 workspace.
type fp8Scratch struct {
	u, t []float32
	val  [256]float32 // E4M3 code -> value (NaN codes 0)
}

func newFP8Scratch(block int) *fp8Scratch {
	f := &fp8Scratch{u: make([]float32, block), t: make([]float32, block)}
	for c := range 256 {
		if c&0x7F != 0x7F {
			f.val[c] = dtype.E4M3FNToF32(uint8(c))
		}
	}
	return f
}

// encode codes one finite block raw (up to B elements of dt) into codes (B
// bytes) and returns its s and α; ok false when the block travels exact
// (its transform overflows, or is below fp8Tiny).
func (f *fp8Scratch) encode(dt dtype.DType, codes, raw []byte) (s, alpha float32, ok bool) {
	u := f.u
	n := len(raw) / dt.Size()
	var m float32
	if useAVX2 {
		sum, mbits := fp8EncodeSIMD(dt, u, f.t, raw)
		alpha = fp8AlphaOf(sum, n)
		m = math.Float32frombits(mbits) // the largest |u|; NaN or Inf if any is
	} else {
		widen(dt, u[:n], raw)
		clear(u[n:])
		alpha = fp8Alpha(u, f.t, n)
		fwht(u)
		for _, v := range u {
			m = max(m, abs32(v))
		}
	}
	switch {
	case !(m <= math.MaxFloat32): // the transform overflowed (Inf, or Inf-Inf)
		return 0, 0, false
	case m == 0:
		clear(codes)
		return 0, alpha, true
	case m < math.Float32frombits(fp8Tiny):
		return 0, 0, false
	}
	inv := float32(fp8Max / m)
	done := 0
	if useAVX2 {
		done = e4m3SIMD(codes, u, inv)
	}
	for i, v := range u[done:] {
		codes[done+i] = dtype.F32ToE4M3FN(v * inv)
	}
	return m / fp8Max, alpha, true
}

// fp8Alpha is TACO's α = τ/σ for the block u (n elements, zeros to B): the
// squares summed as a tree, at strides B/2, B/4, ..., 1 (a CUDA block's
// reduction), divided by n. Σx² overflowing float32 gives α = 0.
func fp8Alpha(u, t []float32, n int) float32 {
	for i, v := range u {
		t[i] = v * v
	}
	for h := len(t) / 2; h >= 1; h /= 2 {
		for i := range h {
			t[i] += t[i+h]
		}
	}
	return fp8AlphaOf(t[0], n)
}

// fp8AlphaOf is τ/σ for the sum of squares sum of n elements.
func fp8AlphaOf(sum float32, n int) float32 {
	sigma := float32(math.Sqrt(float64(sum/float32(n) + fp8Eps))) // float64 sqrt rounds to float32 exactly
	return fp8Tau / sigma
}

// fwht is the unnormalised Walsh-Hadamard transform of u in place:
// butterflies (a, b) -> (a+b, a-b) at strides 1, 2, ..., B/2, in that
// order. Applied twice it gives B·u (within rounding).
func fwht(u []float32) {
	n := len(u)
	for h := 1; h < n; h *= 2 {
		for j := 0; j < n; j += 2 * h {
			lo, hi := u[j:j+h], u[j+h:j+2*h]
			for i := range lo {
				a, b := lo[i], hi[i]
				lo[i], hi[i] = a+b, a-b
			}
		}
	}
}

// decodeGo sets the first len(out) elements of a block's float32 values
// from its codes and scale, x' = H(q)·(s/B) (s/B exact: a power of two
// apart, and normal: see fp8Tiny), in portable Go; decodeTo and accumulate
// fuse the AVX2 path's last step with their own.
func (f *fp8Scratch) decodeGo(out []float32, codes []byte, s float32) {
	u := f.u
	for i, c := range codes {
		u[i] = f.val[c]
	}
	fwht(u)
	k := s / float32(len(u))
	for i := range out {
		out[i] = u[i] * k
	}
}

// decodeTo is decodeGo rounded to dt into dst (len(dst)/dt.Size() elements),
// the product and the narrowing in one pass on the AVX2 path.
func (f *fp8Scratch) decodeTo(dt dtype.DType, dst, codes []byte, s float32) {
	w := f.t[:len(dst)/dt.Size()]
	if !useAVX2 {
		f.decodeGo(w, codes, s)
		narrow(dt, dst, w)
		return
	}
	u := f.u
	k := s / float32(len(u))
	fp8DecodeSIMD(u, codes)
	done := fp8NarrowSIMD(dt, dst, u, k)
	if w = w[done:]; len(w) > 0 {
		for i := range w {
			w[i] = u[done+i] * k
		}
		narrow(dt, dst[done*dt.Size():], w)
	}
}

// accumulate adds a block's float32 values to a (len(a) elements), or
// with first sets a to them.
func (f *fp8Scratch) accumulate(a []float32, codes []byte, s float32, first bool) {
	if useAVX2 {
		u := f.u
		k := s / float32(len(u))
		fp8DecodeSIMD(u, codes)
		done := fp8ScaleSIMD(a, u, k, !first)
		for i := done; i < len(a); i++ {
			if first {
				a[i] = u[i] * k
			} else {
				a[i] += float32(u[i] * k) // two roundings, never an FMA
			}
		}
		return
	}
	w := f.t[:len(a)]
	f.decodeGo(w, codes, s)
	if first {
		copy(a, w)
		return
	}
	for i, v := range w {
		a[i] += v
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }
