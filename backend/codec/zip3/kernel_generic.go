package zip3

import "github.com/zipccl/zipccl/backend/codec/internal/crc32c"

// Kernel selection. The portable kernels are always available; SIMD kernels
// replace them at init when the CPU supports them (see kernel_amd64.go).
var (
	encodeBF16Kernel = encodeBF16Go
	decodeBF16Kernel = decodeBF16GoK
	// KernelName names the active bf16 kernels.
	KernelName = "go"
)

// UsePortable switches to the portable kernels (for tests and benchmarks)
// and returns a function that restores the previous choice.
func UsePortable() (restore func()) {
	e, d, n := encodeBF16Kernel, decodeBF16Kernel, KernelName
	encodeBF16Kernel, decodeBF16Kernel, KernelName = encodeBF16Go, decodeBF16GoK, "go"
	return func() { encodeBF16Kernel, decodeBF16Kernel, KernelName = e, d, n }
}

// mem carries memory hints to the kernels: nt asks for non-temporal stores
// of the output, pf is the distance in bytes from this block's input to
// the next block's (prefetched while this one is coded; 0: none).
type mem struct {
	nt bool
	pf int
}

// escScratch holds a padded copy of a block's escapes for the SIMD decoders.
type escScratch struct{ buf []byte }

// padded returns a copy of esc followed by 64 readable bytes.
func (sc *escScratch) padded(esc []byte) []byte {
	if cap(sc.buf) < len(esc)+64 {
		sc.buf = make([]byte, len(esc)+64+len(esc)/2)
	}
	pad := sc.buf[:len(esc)+64]
	copy(pad, esc)
	return pad
}

func decodeBF16GoK(dst, r8, planes []byte, plen int, esc []byte, groups int, expOf *[8]uint8, codeOf *[256]uint8, _ Window, _ *escScratch, crc uint32, _ mem) (int, uint32) {
	k := decodeBF16Go(dst, r8, planes, plen, esc, groups, expOf, codeOf)
	if k < 0 {
		return -1, 0
	}
	return k, crc32c.Update(crc, dst[:64*groups])
}
