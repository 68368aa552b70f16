package dtype

import "math"

// F16ToF32 widens an IEEE binary16 value (given by its bit pattern) to
// float32. Finite values and infinities convert exactly. A NaN keeps its sign
// and payload and is made quiet, which is what the F16C instruction vcvtph2ps
// (used by torch on x86), AArch64's fcvt and c10's portable fallback all do.
func F16ToF32(h uint16) float32 {
	// Written without calls so that it inlines into reduction loops.
	em := uint32(h & 0x7FFF) // exponent and mantissa
	r := em<<13 + 112<<23    // normal: rebias the exponent (127-15)
	if em >= 0x7C00 {        // Inf or NaN: all-ones exponent
		r += 112 << 23
		if em != 0x7C00 {
			r |= 0x00400000 // quiet the NaN
		}
	} else if em < 0x0400 { // zero or subnormal: em × 2⁻²⁴, exact in float32
		r = math.Float32bits(float32(em) * 0x1p-24)
	}
	return math.Float32frombits(uint32(h&0x8000)<<16 | r)
}

// F32ToF16 rounds f to IEEE binary16 with round-to-nearest-even and returns
// the bit pattern. Subnormal results are produced (no flush to zero) and
// overflow rounds to ±Inf. A NaN keeps its sign and the top 9 bits of its
// payload and is made quiet: sign | 0x7E00 | mantissa>>13. That is what torch
// produces on x86 (c10 uses F16C's vcvtps2ph there, as do torch's vectorised
// kernels) and on AArch64; only c10's portable C fallback, which torch does
// not use on those platforms, would drop the payload.
func F32ToF16(f float32) uint16 {
	u := math.Float32bits(f)
	a := u & 0x7FFFFFFF
	if a-0x38800000 < 0x47800000-0x38800000 { // 2⁻¹⁴ ≤ |f| < 65536
		a -= 112 << 23                              // rebias the exponent (127-15)
		a += 0xFFF + (a>>13)&1                      // round to nearest, ties to even;
		return uint16(u>>16)&0x8000 | uint16(a>>13) // a carry may give Inf
	}
	return f32ToF16Special(u)
}

// f32ToF16Special handles |f| < 2⁻¹⁴ (zero and subnormal results), |f| ≥
// 65536 (Inf) and NaN.
//
//go:noinline
func f32ToF16Special(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7FFFFFFF
	switch {
	case a > 0x7F800000:
		return sign | 0x7E00 | uint16(a>>13)&0x3FF
	case a >= 0x47800000:
		return sign | 0x7C00
	}
	// Round a to a multiple of 2⁻²⁴ with ties to even; that multiple is the
	// encoding (0x400, the smallest normal, can result from rounding up).
	e := a >> 23
	if e < 102 { // |f| < 2⁻²⁵ always rounds to zero
		return sign
	}
	m := a&0x7FFFFF | 0x800000
	s := 126 - e // 14..24
	q := m >> s
	r := m & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if r > half || (r == half && q&1 != 0) {
		q++
	}
	return sign | uint16(q)
}
