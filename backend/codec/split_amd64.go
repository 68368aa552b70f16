//go:build !purego

package codec

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
	"github.com/zipccl/zipccl/backend/codec/internal/vperm"
	"github.com/zipccl/zipccl/backend/codec/zip3"
)

//go:noescape
func splitBF16AVX512(r8, syms, src *byte, n64 int)

//go:noescape
func symsBF16AVX512(syms, src *byte, n64 int)

//go:noescape
func mergeBF16AVX512(dst, r8, syms *byte, n64 int)

// mergeBF16CRCAVX512 is mergeBF16AVX512 folding the output into a CRC-32C
// (split_amd64.s).
//
//go:noescape
func mergeBF16CRCAVX512(dst, r8, syms *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP32CRCAVX512 rebuilds float32 from huff2's four byte planes,
// folding the output into a CRC-32C (split_amd64.s).
//
//go:noescape
func mergeFP32CRCAVX512(dst, p0, p1, p2, p3 *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP32WCRCAVX512 is mergeFP32CRCAVX512 with the low halves as words
// (huff's R16).
//
//go:noescape
func mergeFP32WCRCAVX512(dst, syms, r8, r16 *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP16CRCAVX512 interleaves low and high bytes into float16, folding
// the output into a CRC-32C.
//
//go:noescape
func mergeFP16CRCAVX512(dst, lo, hi *byte, n64 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

//go:noescape
func splitBF16AVX2(r8, syms, src *byte, n32 int)

//go:noescape
func mergeBF16AVX2(dst, r8, syms *byte, n32 int)

// mergeBF16CRCAVX2 is mergeBF16AVX2 folding the output into a CRC-32C with
// 256-bit carry-less multiplies (split_amd64.s).
//
//go:noescape
func mergeBF16CRCAVX2(dst, r8, syms *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP16CRCAVX2 interleaves low and high bytes into float16, folding the
// output into a CRC-32C with 256-bit carry-less multiplies.
//
//go:noescape
func mergeFP16CRCAVX2(dst, lo, hi *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP32CRCAVX2 is mergeFP32CRCAVX512 for AVX2 with 256-bit carry-less
// multiplies, 32 elements a step.
//
//go:noescape
func mergeFP32CRCAVX2(dst, p0, p1, p2, p3 *byte, n32 int, state uint32, k *[10]uint64, out *[16]byte, nt uint8)

// mergeFP32AVX2 rebuilds float32 from huff2's four byte planes, 32 a step
// (split_amd64.s).
//
//go:noescape
func mergeFP32AVX2(dst, p0, p1, p2, p3 *byte, n32 int)

var (
	hasAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512VBMI)
	hasAVX2   = cpuid.CPU.Supports(cpuid.AVX2)
	// hasFoldY: 256-bit VPCLMULQDQ without AVX-512 (AMD Zen 3, Intel Ice
	// Lake client and later), for the AVX2 merge+CRC kernels.
	hasFoldY = hasAVX2 && cpuid.CPU.Supports(cpuid.VPCLMULQDQ, cpuid.CLMUL)
)

func init() { useSplitKernels(bestSplit()) }

func bestSplit() string {
	switch {
	case hasAVX512:
		return "avx512"
	case hasAVX2:
		return "avx2"
	}
	return "go"
}

// splitKernels lists the usable split/merge kernel sets, fastest first.
func splitKernels() []string {
	var k []string
	if hasAVX512 {
		k = append(k, "avx512")
	}
	if hasAVX2 {
		k = append(k, "avx2")
	}
	if hasFoldY {
		k = append(k, "avx2-nofold") // the merges of AVX2 CPUs without VPCLMULQDQ
	}
	return append(k, "go")
}

// splitLabel names bestSplit's set for Kernels.
func splitLabel() string {
	if b := bestSplit(); b != "avx2" || !hasFoldY {
		return b
	}
	return "avx2+vpclmulqdq"
}

func useSplitKernels(name string) {
	switch {
	case name == "avx512" && hasAVX512:
		splitBF16, symsBF16, mergeBF16 = splitBF16Z, symsBF16Z, mergeBF16Z
		splitFP16, mergeFP16 = splitFP16Z, mergeFP16Z
		setMergeCRC(crc32c.HasFold(), false)
	case (name == "avx2" || name == "avx2-nofold") && hasAVX2:
		splitBF16, symsBF16, mergeBF16 = splitBF16Y, symsBF16Y, mergeBF16Y
		splitFP16, mergeFP16 = splitFP16Y, mergeFP16Y
		fold := hasFoldY && name == "avx2"
		setMergeCRC(false, fold)
		if !fold {
			mergeFP32CRC = mergeFP32CRCYNoFold
		}
	default:
		splitBF16, symsBF16, mergeBF16 = splitBF16Go, symsBF16Go, mergeBF16Go
		splitFP16, mergeFP16 = splitFP16Go, mergeFP16Go
		setMergeCRC(false, false)
	}
}

func splitBF16Z(r8, syms, src []byte) {
	n := len(src) / 2
	m := n / 64
	if m > 0 {
		_, _, _ = r8[64*m-1], syms[64*m-1], src[128*m-1]
		splitBF16AVX512(&r8[0], &syms[0], &src[0], m)
	}
	splitBF16Go(r8[64*m:], syms[64*m:], src[128*m:])
}

func symsBF16Z(syms, src []byte) {
	n := len(src) / 2
	m := n / 64
	if m > 0 {
		_, _ = syms[64*m-1], src[128*m-1]
		symsBF16AVX512(&syms[0], &src[0], m)
	}
	symsBF16Go(syms[64*m:], src[128*m:])
}

func mergeBF16Z(dst, r8, syms []byte) {
	n := len(dst) / 2
	m := n / 64
	if m > 0 {
		_, _, _ = dst[128*m-1], r8[64*m-1], syms[64*m-1]
		mergeBF16AVX512(&dst[0], &r8[0], &syms[0], m)
	}
	mergeBF16Go(dst[128*m:], r8[64*m:], syms[64*m:])
}

// mergeFoldK: the CRC fold constants of mergeBF16CRCAVX512 (shifts by
// 1024, 512, 384, 256 and 128 bits).
var mergeFoldK = func() (k [10]uint64) {
	for i, d := range []int{1024, 512, 384, 256, 128} {
		c := crc32c.FoldK(d)
		k[2*i], k[2*i+1] = c[0], c[1]
	}
	return
}()

// mergeBF16CRCZ is mergeBF16Z returning the CRC-32C of dst, folded as the
// kernel writes it; nt (with dst 64-byte aligned) streams the output past
// the caches. mergeBF16CRCY is the same with the AVX2 kernel.
func mergeBF16CRCZ(dst, r8, syms []byte, nt bool) uint32 {
	return merge16CRC(dst, r8, syms, nt, false, true)
}

func mergeBF16CRCY(dst, r8, syms []byte, nt bool) uint32 {
	return merge16CRC(dst, r8, syms, nt, false, false)
}

// merge16CRC runs a two-plane merge+CRC kernel (float16's or bfloat16's;
// AVX-512's 64 elements a step where z, else AVX2's 32) over whole steps
// and the portable merge over the tail. The kernels are called directly,
// not as func values, so f stays on the stack (TestNoAllocs).
func merge16CRC(dst, r8, syms []byte, nt, fp16, z bool) uint32 {
	step := 32
	if z {
		step = 64
	}
	m := len(dst) / 2 / step
	e := step * m // elements done by the kernel
	var crc uint32
	if m > 0 {
		_, _, _ = dst[2*e-1], r8[e-1], syms[e-1]
		var f [16]byte
		switch {
		case z && fp16:
			mergeFP16CRCAVX512(&dst[0], &r8[0], &syms[0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		case z:
			mergeBF16CRCAVX512(&dst[0], &r8[0], &syms[0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		case fp16:
			mergeFP16CRCAVX2(&dst[0], &r8[0], &syms[0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		default:
			mergeBF16CRCAVX2(&dst[0], &r8[0], &syms[0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		}
		crc = crc32c.FromFold(&f)
	}
	if fp16 {
		mergeFP16Go(dst[2*e:], r8[e:], syms[e:])
	} else {
		mergeBF16Go(dst[2*e:], r8[e:], syms[e:])
	}
	return crc32c.Update(crc, dst[2*e:])
}

// mergeFP32CRCZ is mergeFP32CRC with the AVX-512 kernel for whole steps of
// 64 elements, mergeFP32CRCY with the AVX2 one for steps of 32.
func mergeFP32CRCZ(dst []byte, pl *[4][]byte, nt bool) uint32 {
	return mergeFP32CRCK(dst, pl, nt, true)
}

func mergeFP32CRCY(dst []byte, pl *[4][]byte, nt bool) uint32 {
	return mergeFP32CRCK(dst, pl, nt, false)
}

// mergeFP32CRCYNoFold is mergeFP32CRC with the AVX2 merge, then the
// checksum.
func mergeFP32CRCYNoFold(dst []byte, pl *[4][]byte, _ bool) uint32 {
	m := len(dst) / 4 / 32
	e := 32 * m
	if m > 0 {
		_ = dst[4*e-1]
		_, _, _, _ = pl[0][e-1], pl[1][e-1], pl[2][e-1], pl[3][e-1]
		mergeFP32AVX2(&dst[0], &pl[0][0], &pl[1][0], &pl[2][0], &pl[3][0], m)
	}
	mergeFP32Planes(dst[4*e:], pl, e)
	return crc(dst)
}

func mergeFP32CRCK(dst []byte, pl *[4][]byte, nt, z bool) uint32 {
	step := 32
	if z {
		step = 64
	}
	m := len(dst) / 4 / step
	e := step * m
	var crc uint32
	if m > 0 {
		_ = dst[4*e-1]
		_, _, _, _ = pl[0][e-1], pl[1][e-1], pl[2][e-1], pl[3][e-1]
		var f [16]byte
		if z {
			mergeFP32CRCAVX512(&dst[0], &pl[0][0], &pl[1][0], &pl[2][0], &pl[3][0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		} else {
			mergeFP32CRCAVX2(&dst[0], &pl[0][0], &pl[1][0], &pl[2][0], &pl[3][0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		}
		crc = crc32c.FromFold(&f)
	}
	mergeFP32Planes(dst[4*e:], pl, e)
	return crc32c.Update(crc, dst[4*e:])
}

// setMergeCRC selects the one-pass merge and checksum kernels (z: AVX-512
// with carry-less multiplies; y: AVX2 with 256-bit ones, all but huff's
// float32) or the merge then checksum.
func setMergeCRC(z, y bool) {
	mergeBF16CRC, mergeFP32CRC, mergeFP32WCRC, mergeFP16CRC = mergeBF16CRCGo, mergeFP32CRCGo, mergeFP32WCRCGo, mergeFP16CRCGo
	switch {
	case z:
		mergeBF16CRC, mergeFP32CRC, mergeFP32WCRC, mergeFP16CRC = mergeBF16CRCZ, mergeFP32CRCZ, mergeFP32WCRCZ, mergeFP16CRCZ
	case y:
		mergeBF16CRC, mergeFP32CRC, mergeFP16CRC = mergeBF16CRCY, mergeFP32CRCY, mergeFP16CRCY
	}
}

// mergeFP32WCRCZ is mergeFP32WCRC with the AVX-512 kernel for whole steps.
func mergeFP32WCRCZ(dst, r8, r16, syms []byte, hi *[]byte, nt bool) uint32 {
	n := len(dst) / 4
	m := n / 64
	var crc uint32
	if m > 0 {
		_, _, _, _ = dst[256*m-1], r8[64*m-1], r16[128*m-1], syms[64*m-1]
		var f [16]byte
		mergeFP32WCRCAVX512(&dst[0], &syms[0], &r8[0], &r16[0], m, ^uint32(0), &mergeFoldK, &f, ntOK(dst, nt))
		crc = crc32c.FromFold(&f)
	}
	if t := n - 64*m; t > 0 {
		*hi = growBuf(*hi, 2*t)
		mergeBF16Go((*hi)[:2*t], r8[64*m:], syms[64*m:])
		zip3.JoinHalves(dst[256*m:], (*hi)[:2*t], r16[128*m:128*m+2*t])
	}
	return crc32c.Update(crc, dst[256*m:])
}

// mergeFP16CRCZ is mergeFP16CRC with the AVX-512 kernel for whole steps,
// mergeFP16CRCY with the AVX2 one.
func mergeFP16CRCZ(dst, r8, syms []byte, nt bool) uint32 {
	return merge16CRC(dst, r8, syms, nt, true, true)
}

func mergeFP16CRCY(dst, r8, syms []byte, nt bool) uint32 {
	return merge16CRC(dst, r8, syms, nt, true, false)
}

// ntOK: non-temporal stores only pay as whole aligned 64-byte lines.
func ntOK(dst []byte, nt bool) uint8 {
	if nt && uintptr(unsafe.Pointer(&dst[0]))%64 == 0 {
		return 1
	}
	return 0
}

// Index tables of the float16 byte split and merge: the low and the high
// bytes of a 128-byte chunk, and the two 64-byte halves of the chunk rebuilt
// from 64 low bytes (first table) and 64 high bytes (second).
var fp16Lo, fp16Hi, fp16Ilv0, fp16Ilv1 = func() (lo, hi, i0, i1 vperm.Table) {
	for k := range lo {
		lo[k], hi[k] = byte(2*k), byte(2*k+1)
		i0[k], i1[k] = byte(k/2+64*(k%2)), byte(32+k/2+64*(k%2))
	}
	return
}()

// splitFP16SIMD wraps a kernel that splits step float16 a step; the rest
// is done in Go.
func splitFP16SIMD(step int, kernel func(r8, syms, src *byte, n int)) func(r8, syms, src []byte) {
	return func(r8, syms, src []byte) {
		n := len(src) / 2
		m := n / step
		if m > 0 {
			_, _, _ = r8[step*m-1], syms[step*m-1], src[2*step*m-1]
			kernel(&r8[0], &syms[0], &src[0], m)
		}
		splitFP16Go(r8[step*m:], syms[step*m:], src[2*step*m:2*n])
	}
}

func mergeFP16SIMD(step int, kernel func(dst, r8, syms *byte, n int)) func(dst, r8, syms []byte) {
	return func(dst, r8, syms []byte) {
		n := len(dst) / 2
		m := n / step
		if m > 0 {
			_, _, _ = dst[2*step*m-1], r8[step*m-1], syms[step*m-1]
			kernel(&dst[0], &r8[0], &syms[0], m)
		}
		mergeFP16Go(dst[2*step*m:2*n], r8[step*m:], syms[step*m:])
	}
}

var (
	splitFP16Z = splitFP16SIMD(64, func(r8, syms, src *byte, n int) { vperm.Deinterleave(r8, syms, src, n, &fp16Lo, &fp16Hi, 0) })
	mergeFP16Z = mergeFP16SIMD(64, func(dst, r8, syms *byte, n int) { vperm.Interleave(dst, r8, syms, n, &fp16Ilv0, &fp16Ilv1) })
	splitFP16Y = splitFP16SIMD(32, func(r8, syms, src *byte, n int) { vperm.SplitBytesAVX2(r8, syms, src, n, 0) })
	mergeFP16Y = mergeFP16SIMD(32, vperm.JoinBytesAVX2)
)

func splitBF16Y(r8, syms, src []byte) {
	n := len(src) / 2
	m := n / 32
	if m > 0 {
		_, _, _ = r8[32*m-1], syms[32*m-1], src[64*m-1]
		splitBF16AVX2(&r8[0], &syms[0], &src[0], m)
	}
	splitBF16Go(r8[32*m:], syms[32*m:], src[64*m:])
}

func symsBF16Y(syms, src []byte) {
	// the AVX2 split writes the residues to a throwaway buffer
	var tmp [4096]byte
	for len(src) >= 2*len(tmp) {
		splitBF16Y(tmp[:], syms[:len(tmp)], src[:2*len(tmp)])
		syms, src = syms[len(tmp):], src[2*len(tmp):]
	}
	splitBF16Y(tmp[:len(src)/2], syms, src)
}

func mergeBF16Y(dst, r8, syms []byte) {
	n := len(dst) / 2
	m := n / 32
	if m > 0 {
		_, _, _ = dst[64*m-1], r8[32*m-1], syms[32*m-1]
		mergeBF16AVX2(&dst[0], &r8[0], &syms[0], m)
	}
	mergeBF16Go(dst[64*m:], r8[32*m:], syms[32*m:])
}
