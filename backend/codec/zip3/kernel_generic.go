package zip3

import "github.com/zipccl/zipccl/backend/codec/internal/crc32c"

// kernelSet is one set of kernels: the bf16 block encoder and decoder, the
// split of float32 into its 16-bit halves and the join back, and float16's
// recasting to bf16-shaped words and back. The portable set is always
// available; SIMD sets replace it at init when the CPU supports them (see
// kernel_amd64.go).
type kernelSet struct {
	name   string
	encode func(r8, planes []byte, plen int, esc, src []byte, groups int, base uint8, zero bool, crc uint32, m mem) ([]byte, uint32)
	decode func(dst, r8, planes []byte, plen int, esc []byte, groups int, expOf *[8]uint8, codeOf *[256]uint8, w Window, sc *escScratch, crc uint32, m mem) (int, uint32)
	split  func(hi, lo, src []byte, pf int)
	join   func(dst, hi, lo []byte)
	// float16: pseudo bf16 words and residue planes, and back
	toPseudo16   func(y, planes []byte, plen int, src []byte, pf int)
	fromPseudo16 func(dst, y, planes []byte, plen int) error
	// sample sums ChooseWindow's sample of a full bf16 block
	sample func(b *[2 * fullN]byte) (sum uint64, nz, zc int)
}

var portable = kernelSet{name: "go", encode: encodeBF16Go, decode: decodeBF16GoK, split: splitHalvesGo, join: joinHalvesGo,
	toPseudo16: fp16ToPseudoGo, fromPseudo16: fp16FromPseudo, sample: sampleBF16Go}

var active = portable

// KernelName names the active kernel set.
var KernelName = "go"

// use makes k the active set and returns a function restoring the previous.
func use(k kernelSet) (restore func()) {
	prev := active
	active, KernelName = k, k.name
	return func() { active, KernelName = prev, prev.name }
}

// UsePortable switches to the portable kernels (for tests and benchmarks)
// and returns a function that restores the previous choice.
func UsePortable() (restore func()) { return use(portable) }

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
