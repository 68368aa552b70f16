//go:build !purego

package vperm

// Deinterleave reads n 128-byte chunks of src. For each, it writes 64 bytes
// picked by ia to a and 64 picked by ib to b (a and b advance 64 bytes a
// chunk). It prefetches the lines pf bytes past each chunk (0: none).
//
//go:noescape
func Deinterleave(a, b, src *byte, n int, ia, ib *Table, pf int)

// Interleave reads n 64-byte chunks of a and of b. For each pair, it writes
// 128 bytes to dst: the 64 picked by i0, then the 64 picked by i1, from a
// (indices 0-63) and b (64-127).
//
//go:noescape
func Interleave(dst, a, b *byte, n int, i0, i1 *Table)

// The AVX2 kernels split 16-bit words into their low and high bytes
// (Bytes) or 32-bit dwords into their low and high 16-bit halves (Words),
// 64 source bytes a step, and join them back. The split prefetches the
// lines pf bytes past each step (0: none).

//go:noescape
func SplitBytesAVX2(lo, hi, src *byte, n int, pf int)

//go:noescape
func SplitWordsAVX2(lo, hi, src *byte, n int, pf int)

//go:noescape
func JoinBytesAVX2(dst, lo, hi *byte, n int)

//go:noescape
func JoinWordsAVX2(dst, lo, hi *byte, n int)
