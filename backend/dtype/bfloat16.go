package dtype

import "math"

// BFloat16NaN is the bit pattern F32ToBF16 returns for every NaN input.
const BFloat16NaN uint16 = 0x7FC0

// BF16ToF32 widens a bfloat16 (given by its bit pattern) to float32. The
// conversion is exact; NaN payloads are kept as they are.
func BF16ToF32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// F32ToBF16 rounds f to bfloat16 with round-to-nearest-even and returns the
// bit pattern. Overflow rounds to ±Inf. Every NaN becomes BFloat16NaN
// (0x7FC0), as c10::detail::round_to_nearest_even does. Note that torch's
// vectorised AVX2/AVX-512 kernels write 0xFFFF for NaN instead; both are NaN,
// and we follow the scalar c10 definition so the result does not depend on
// which code path ran.
func F32ToBF16(f float32) uint16 {
	if f != f {
		return BFloat16NaN
	}
	u := math.Float32bits(f)
	// Adding 0x7FFF plus the lowest kept bit rounds ties to even; a carry out
	// of the mantissa correctly bumps the exponent (up to Inf).
	return uint16((u + 0x7FFF + (u>>16)&1) >> 16)
}
