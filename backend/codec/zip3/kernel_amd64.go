//go:build !purego

package zip3

import (
	"unsafe"

	"github.com/klauspost/cpuid/v2"

	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
	"github.com/zipccl/zipccl/backend/codec/internal/vperm"
)

//go:noescape
func encodeBF16AVX512(src, r8, planes *byte, plen int, esc *byte, pairs, pf int, base, zero, nt uint8, state uint32, k *[10]uint64, fold *[16]byte, tbl *[16]byte) (n int, carry uint32)

//go:noescape
func encodeBF16AVX2(src, r8, planes *byte, plen int, esc *byte, groups, pf int, base, zero uint8) int

//go:noescape
func decodeBF16AVX2(dst, r8, planes *byte, plen int, esc *byte, nesc, groups, pf int, tbl *[16]byte, base, zero uint8) int

//go:noescape
func decodeBF16AVX512(dst, r8, planes *byte, plen int, esc *byte, nesc, pairs, pf int, tbl *[16]byte, base, zero, nt uint8, state uint32, k *[10]uint64, fold *[16]byte) int

// HasAVX512 reports whether the AVX-512 kernels can run on this CPU.
var HasAVX512 = cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512VBMI, cpuid.AVX512VBMI2, cpuid.POPCNT, cpuid.VPCLMULQDQ)

// HasAVX2 reports whether the AVX2 kernels can run on this CPU.
var HasAVX2 = cpuid.CPU.Supports(cpuid.AVX2, cpuid.POPCNT)

//go:noescape
func sampleBF16AVX512(src *byte, pos *[SampleSize]int32) (sum uint64, nz, zc int)

//go:noescape
func sampleBF16AVX2(src *byte, pos *[SampleSize]int32) (sum uint64, nz, zc int)

//go:noescape
func fp16ToPseudoAVX512(y, planes *byte, plen int, src *byte, n32, pf int)

//go:noescape
func fp16FromPseudoAVX512(dst, y, planes *byte, plen int, n32 int) (bad bool)

//go:noescape
func fp16ToPseudoAVX2(y, planes *byte, plen int, src *byte, n32, pf int)

//go:noescape
func fp16FromPseudoAVX2(dst, y, planes *byte, plen int, n32 int) (bad bool)

var (
	avx512Set = kernelSet{name: "avx512", encode: encodeBF16AVX512Go, decode: decodeBF16AVX512Go,
		split: splitHalvesSIMD(32, func(hi, lo, src *byte, n, pf int) {
			vperm.Deinterleave(hi, lo, src, n, &halvesHi, &halvesLo, pf)
		}),
		join: joinHalvesSIMD(32, func(dst, hi, lo *byte, n int) {
			vperm.Interleave(dst, lo, hi, n, &halvesIlv0, &halvesIlv1)
		}),
		toPseudo16: fp16ToPseudoSIMD(fp16ToPseudoAVX512), fromPseudo16: fp16FromPseudoSIMD(fp16FromPseudoAVX512),
		sample: sampleSIMD(sampleBF16AVX512)}
	avx2Set = kernelSet{name: "avx2", encode: encodeBF16AVX2Go, decode: decodeBF16AVX2Go,
		split:      splitHalvesSIMD(16, func(hi, lo, src *byte, n, pf int) { vperm.SplitWordsAVX2(lo, hi, src, n, pf) }),
		join:       joinHalvesSIMD(16, func(dst, hi, lo *byte, n int) { vperm.JoinWordsAVX2(dst, lo, hi, n) }),
		toPseudo16: fp16ToPseudoSIMD(fp16ToPseudoAVX2), fromPseudo16: fp16FromPseudoSIMD(fp16FromPseudoAVX2),
		sample: sampleSIMD(sampleBF16AVX2)}
)

func init() {
	switch {
	case HasAVX512:
		use(avx512Set)
	case HasAVX2:
		use(avx2Set)
	}
}

// Kernels lists the kernel sets usable on this CPU, fastest first ("go" is
// always last). UseKernel selects one.
func Kernels() []string {
	var k []string
	if HasAVX512 {
		k = append(k, "avx512")
	}
	if HasAVX2 {
		k = append(k, "avx2")
	}
	return append(k, "go")
}

// UseKernel selects a kernel set by name (see Kernels) and returns a function
// restoring the previous one. It is meant for tests and benchmarks.
func UseKernel(name string) (restore func()) {
	switch {
	case name == "avx512" && HasAVX512:
		return use(avx512Set)
	case name == "avx2" && HasAVX2:
		return use(avx2Set)
	}
	return use(portable)
}

// Index tables of the float32 half split and join: the high and the low
// halves of the 32 floats of a 128-byte chunk, and floats 0-15 and 16-31
// rebuilt from 32 low halves (first table) and 32 high halves (second).
var halvesHi, halvesLo, halvesIlv0, halvesIlv1 = func() (hi, lo, i0, i1 vperm.Table) {
	for k := range hi {
		hi[k] = byte(4*(k/2) + 2 + k%2)
		lo[k] = byte(4*(k/2) + k%2)
		f, b := k/4, k%4
		i0[k], i1[k] = byte(2*f+b), byte(2*(16+f)+b)
		if b >= 2 {
			i0[k], i1[k] = i0[k]+62, i1[k]+62 // from the high halves
		}
	}
	return
}()

// splitHalvesSIMD wraps a kernel that splits step floats a step; the rest
// is done in Go. The kernel prefetches the lines pf bytes on (the next
// block's source).
func splitHalvesSIMD(step int, kernel func(hi, lo, src *byte, n, pf int)) func(hi, lo, src []byte, pf int) {
	return func(hi, lo, src []byte, pf int) {
		n := len(src) / 4
		m := n / step
		if m > 0 {
			_, _, _ = hi[2*step*m-1], lo[2*step*m-1], src[4*step*m-1]
			kernel(&hi[0], &lo[0], &src[0], m, pf)
		}
		splitHalvesGo(hi[2*step*m:], lo[2*step*m:], src[4*step*m:4*n], 0)
	}
}

func joinHalvesSIMD(step int, kernel func(dst, hi, lo *byte, n int)) func(dst, hi, lo []byte) {
	return func(dst, hi, lo []byte) {
		n := len(dst) / 4
		m := n / step
		if m > 0 {
			_, _, _ = dst[4*step*m-1], hi[2*step*m-1], lo[2*step*m-1]
			kernel(&dst[0], &hi[0], &lo[0], m)
		}
		joinHalvesGo(dst[4*step*m:4*n], hi[2*step*m:], lo[2*step*m:])
	}
}

// sampleSIMD wraps a kernel that gathers and sums the window sample of a
// full bf16 block (fullPos).
func sampleSIMD(kernel func(src *byte, pos *[SampleSize]int32) (uint64, int, int)) func(b *[2 * fullN]byte) (uint64, int, int) {
	return func(b *[2 * fullN]byte) (uint64, int, int) { return kernel(&b[0], &fullPos) }
}

// fp16ToPseudoSIMD wraps a kernel that does 32 float16 a step; the rest (a
// partial group of planes) is done in Go. The kernel prefetches the lines
// pf bytes on (the next block's source).
func fp16ToPseudoSIMD(kernel func(y, planes *byte, plen int, src *byte, n32, pf int)) func(y, planes []byte, plen int, src []byte, pf int) {
	return func(y, planes []byte, plen int, src []byte, pf int) {
		n := len(src) / 2
		m := n / 32
		if m > 0 {
			_, _, _ = y[64*m-1], planes[2*plen+4*m-1], src[64*m-1]
			kernel(&y[0], &planes[0], plen, &src[0], m, pf)
		}
		fp16ToPseudoGo(y[64*m:], planes[4*m:], plen, src[64*m:2*n], 0)
	}
}

func fp16FromPseudoSIMD(kernel func(dst, y, planes *byte, plen int, n32 int) bool) func(dst, y, planes []byte, plen int) error {
	return func(dst, y, planes []byte, plen int) error {
		n := len(dst) / 2
		m := n / 32
		if m > 0 {
			_, _, _ = dst[64*m-1], y[64*m-1], planes[2*plen+4*m-1]
			if kernel(&dst[0], &y[0], &planes[0], plen, m) {
				return errFieldRange
			}
		}
		return fp16FromPseudo(dst[64*m:2*n], y[64*m:], planes[4*m:], plen)
	}
}

func encodeBF16AVX2Go(r8, planes []byte, plen int, esc, src []byte, groups int, base uint8, zero bool, crc uint32, m mem) ([]byte, uint32) {
	if groups > 0 {
		crc = crc32c.Update(crc, src[:64*groups])
		_ = src[64*groups-1]
		_ = r8[32*groups-1]
		_ = planes[2*plen+4*groups-1]
		esc = growEsc(esc, 32*groups+64)
		n := encodeBF16AVX2(&src[0], &r8[0], &planes[0], plen, &esc[len(esc):cap(esc)][0], groups, m.pf, base, b2u(zero))
		esc = esc[:len(esc)+n]
	}
	return esc, crc
}

func decodeBF16AVX2Go(dst, r8, planes []byte, plen int, esc []byte, groups int, expOf *[8]uint8, codeOf *[256]uint8, w Window, sc *escScratch, crc uint32, m mem) (int, uint32) {
	if groups == 0 {
		return 0, crc
	}
	_ = dst[64*groups-1]
	_ = r8[32*groups-1]
	_ = planes[2*plen+4*groups-1]
	pad := sc.padded(esc)
	var tbl [16]byte
	copy(tbl[:], expOf[:])
	k := decodeBF16AVX2(&dst[0], &r8[0], &planes[0], plen, &pad[0], len(esc), groups, m.pf, &tbl, w.Base, b2u(w.Mode == ModeZero))
	if k < 0 {
		return -1, 0
	}
	return k, crc32c.Update(crc, dst[:64*groups])
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// foldK holds the CRC fold constants of the AVX-512 kernels.
var foldK = func() (k [10]uint64) {
	for i, d := range []int{1024, 512, 384, 256, 128} {
		c := crc32c.FoldK(d)
		k[2*i], k[2*i+1] = c[0], c[1]
	}
	return
}()

func encodeBF16AVX512Go(r8, planes []byte, plen int, esc, src []byte, groups int, base uint8, zero bool, crc uint32, m mem) ([]byte, uint32) {
	pairs := groups / 2
	if pairs > 0 {
		_ = src[128*pairs-1]
		_ = r8[64*pairs-1]
		_ = planes[2*plen+8*pairs-1]
		esc = growEsc(esc, 64*pairs+64)
		var f [16]byte
		n, carry := encodeBF16AVX512(&src[0], &r8[0], &planes[0], plen, &esc[len(esc):cap(esc)][0], pairs, m.pf, base, b2u(zero), b2u(m.nt), ^crc, &foldK, &f, &offsetCodes[b2u(zero)])
		esc = esc[:len(esc)+n]
		crc = crc32c.FromFold(&f) ^ carry
	}
	if groups%2 == 1 {
		g := groups - 1
		esc, crc = encodeBF16Go(r8[32*g:], planes[4*g:], plen, esc, src[64*g:], 1, base, zero, crc, mem{})
	}
	return esc, crc
}

// offsetCodes[zero][d] is the code of the field base+d in a plain (0) or
// zero-mode (1) window: the AVX-512 encoder's lookup table.
var offsetCodes = [2][16]byte{
	{1, 2, 3, 4, 5, 6, 7},
	{2, 3, 4, 5, 6, 7},
}

func growEsc(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

func decodeBF16AVX512Go(dst, r8, planes []byte, plen int, esc []byte, groups int, expOf *[8]uint8, codeOf *[256]uint8, w Window, sc *escScratch, crc uint32, m mem) (int, uint32) {
	pairs := groups / 2
	k := 0
	if pairs > 0 {
		_ = dst[128*pairs-1]
		_ = r8[64*pairs-1]
		_ = planes[2*plen+8*pairs-1]
		pad := sc.padded(esc)
		var tbl [16]byte
		copy(tbl[:], expOf[:])
		var f [16]byte
		k = decodeBF16AVX512(&dst[0], &r8[0], &planes[0], plen, &pad[0], len(esc), pairs, m.pf, &tbl, w.Base, b2u(w.Mode == ModeZero), b2u(m.nt && aligned64(dst)), ^crc, &foldK, &f)
		if k < 0 {
			return -1, 0
		}
		crc = crc32c.FromFold(&f)
	}
	if groups%2 == 1 {
		g := groups - 1
		k2, c := decodeBF16GoK(dst[64*g:], r8[32*g:], planes[4*g:], plen, esc[k:], 1, expOf, codeOf, w, sc, crc, mem{})
		if k2 < 0 {
			return -1, 0
		}
		k += k2
		crc = c
	}
	return k, crc
}

// aligned64 reports whether b starts on a 64-byte boundary, which the
// non-temporal 64-byte stores need.
func aligned64(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64 == 0 }
