package dtype

import (
	"math"
	"math/bits"
)

// E4M3FNToF32 widens a float8_e4m3fn value (bit pattern) to float32. The
// conversion is exact; the NaN encodings 0x7F/0xFF become ±0x7FF00000, as
// c10::detail::fp8e4m3fn_to_fp32_value returns.
func E4M3FNToF32(v uint8) float32 {
	// Transcription of fp8e4m3fn_to_fp32_value: renormalise subnormals with a
	// count-leading-zeros shift, then rebias the exponent.
	w := uint32(v) << 24
	sign := w & 0x80000000
	nonsign := w & 0x7FFFFFFF
	shift := uint32(bits.LeadingZeros32(nonsign)) // 32 for zero
	if shift > 4 {
		shift -= 4
	} else {
		shift = 0
	}
	infNaN := uint32(int32(nonsign+0x01000000)>>8) & 0x7F800000
	zero := uint32(int32(nonsign-1) >> 31)
	r := sign | (((nonsign<<shift>>4)+((0x78-shift)<<23))|infNaN)&^zero
	return math.Float32frombits(r)
}

// F32ToE4M3FN rounds f to float8_e4m3fn with round-to-nearest-even, exactly
// as c10::detail::fp8e4m3fn_from_fp32_value in the PyTorch release this
// package is tested against (torch 2.15): finite values beyond the largest
// finite value 448, and ±Inf, saturate to ±448 (0x7E/0xFE); NaN becomes
// 0x7F with f's sign bit. (Older torch releases returned NaN for |f| ≥ 480.)
func F32ToE4M3FN(f float32) uint8 {
	const (
		fp8Max    = 1087 << 20 // 480.0, first value that no longer rounds to a finite e4m3fn
		denormMin = 121 << 23  // 2⁻⁶, smallest normal e4m3fn
		denorm    = 141 << 23  // magic addend that rounds to a multiple of 2⁻⁹
	)
	u := math.Float32bits(f)
	sign := u & 0x80000000
	u ^= sign
	var r uint8
	switch {
	case u >= fp8Max:
		r = 0x7E // saturate
		if u > 0x7F800000 {
			r = 0x7F // NaN
		}
	case u < denormMin:
		// The float add rounds |f| to the subnormal grid with the FPU's
		// round-to-nearest-even; Go never flushes subnormals.
		r = uint8(math.Float32bits(math.Float32frombits(u)+math.Float32frombits(denorm)) - denorm)
	default:
		mantOdd := (u >> 20) & 1
		u = u - 120<<23 + 0x7FFFF + mantOdd // rebias (127-7) and round
		r = uint8(u >> 20)
		if r == 0x7F { // rounding carried into the NaN encoding
			r = 0x7E
		}
	}
	return r | uint8(sign>>24)
}

// E5M2ToF32 widens a float8_e5m2 value (bit pattern) to float32. float8_e5m2
// is the upper byte of a binary16, so this is F16ToF32(v<<8), as in c10.
func E5M2ToF32(v uint8) float32 {
	return F16ToF32(uint16(v) << 8)
}

// F32ToE5M2 rounds f to float8_e5m2 with round-to-nearest-even, exactly as
// c10::detail::fp8e5m2_from_fp32_value: magnitudes that round beyond the
// largest finite value 57344 (|f| ≥ 61440) and ±Inf become ±Inf (0x7C/0xFC);
// NaN becomes 0x7F with f's sign bit.
func F32ToE5M2(f float32) uint8 {
	const (
		inf       = 255 << 23
		fp8Max    = 143 << 23 // 65536.0
		denormMin = 113 << 23 // 2⁻¹⁴, smallest normal e5m2
		denorm    = 134 << 23 // magic addend that rounds to a multiple of 2⁻¹⁶
	)
	u := math.Float32bits(f)
	sign := u & 0x80000000
	u ^= sign
	var r uint8
	switch {
	case u >= fp8Max:
		r = 0x7C // Inf
		if u > inf {
			r = 0x7F // NaN
		}
	case u < denormMin:
		r = uint8(math.Float32bits(math.Float32frombits(u)+math.Float32frombits(denorm)) - denorm)
	default:
		mantOdd := (u >> 21) & 1
		u = u - 112<<23 + 0xFFFFF + mantOdd // rebias (127-15) and round
		r = uint8(u >> 21)
	}
	return r | uint8(sign>>24)
}
