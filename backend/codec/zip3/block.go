package zip3

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
)

// Encoder holds per-block scratch state. The zero value is ready to use.
type Encoder struct {
	// Ahead is the distance in bytes from this block's source to the next
	// block's (0: no next block). The kernels prefetch the next block into
	// L2 while they code this one, so that neither its window sample nor
	// its coding waits on memory.
	Ahead int
	// Stream asks the bf16 kernel to write the R8 array, most of the
	// output, with non-temporal stores where the CPU has them: for
	// tensors larger than the cache, this saves the read-for-ownership of
	// its lines.
	Stream bool

	codeOf [256]uint8
	expOf  [8]uint8
	hi     []byte // fp32: high halves, coded as bf16
	r8     []byte // fp8: throwaway R8 output
}

// EncodeBlock writes the static arrays of the block src (n = len(src)/size
// elements, 0 < n <= MaxBlock) into st[:StaticLen(f, n)] (every byte,
// including padding, is written) and appends the escaped exponent fields to
// esc, in element order. It returns the extended escape slice, the number
// of escapes and the CRC-32C of src (computed in the same pass where the
// kernel can). w comes from ChooseWindow.
func (e *Encoder) EncodeBlock(st, esc, src []byte, f Format, w Window) ([]byte, int, uint32) {
	s := f.spec()
	n := len(src) / s.size
	l := BlockLayout(f, n)
	st = st[:l.StaticLen]
	w.tables(f, &e.codeOf, &e.expOf)
	start := len(esc)
	var crc uint32
	switch f {
	case BF16:
		esc, crc = encodeBF16(st, esc, src, &l, w, mem{nt: e.Stream, pf: e.Ahead})
	case FP32:
		// the high half of a float32 is a bfloat16 with the same exponent
		// field and the same R8 byte: code it with the bf16 kernels
		e.hi = growTo(e.hi, 2*n)
		active.split(e.hi[:2*n], st[l.R16:l.R16+2*n], src, e.Ahead)
		esc, _ = encodeBF16(st, esc, e.hi[:2*n], &l, w, mem{})
		crc = crc32c.Checksum(src)
	case FP16:
		// recast each float16 as a bfloat16 whose exponent field is the
		// 5-bit field and whose R8 byte is the low byte: the bf16 kernels
		// then write R8 and the code planes; the residue planes follow
		e.hi = growTo(e.hi, 2*n)
		active.toPseudo16(e.hi[:2*n], st[l.ResPlanes:], l.PlaneLen, src, e.Ahead)
		esc, _ = encodeBF16(st, esc, e.hi[:2*n], &l, w, mem{})
		crc = crc32c.Checksum(src)
	case E5M2, E4M3:
		// float8: pseudo bf16 words holding just the field; the kernels'
		// R8 output goes to scratch; the residue bits become planes
		e.hi = growTo(e.hi, 2*n)
		e.r8 = growTo(e.r8, l.NP)
		fp8ToPseudo(e.hi[:2*n], src, s)
		esc, _ = encodeBF16To(e.r8, st[l.Planes:l.Planes+3*l.PlaneLen], esc, e.hi[:2*n], &l, w, mem{})
		bytePlanes(st[l.ResPlanes:], l.PlaneLen, src, s.qbits)
		crc = crc32c.Checksum(src)
	default:
		esc = e.encodeGeneric(st, esc, src, s, &l)
		crc = crc32c.Checksum(src)
	}
	// zero the padding past the last valid element
	clearPad(st, &l, s)
	return esc, len(esc) - start, crc
}

func clearPad(st []byte, l *Layout, s *spec) {
	n, np := l.N, l.NP
	if l.R8 >= 0 {
		clear(st[l.R8+n : l.R8+np])
	}
	if l.R16 >= 0 {
		clear(st[l.R16+2*n : l.R16+2*np])
	}
	// planes: words past the last group and bits past n in the last group
	np3 := 3 + l.NumRes
	g := (n + 31) / 32
	for j := 0; j < np3; j++ {
		p := st[l.Planes+j*l.PlaneLen : l.Planes+(j+1)*l.PlaneLen]
		if n%32 != 0 {
			w := binary.LittleEndian.Uint32(p[4*(g-1):])
			binary.LittleEndian.PutUint32(p[4*(g-1):], w&(1<<(n%32)-1))
		}
		clear(p[4*g:])
	}
	clear(st[l.ResPlanes+l.NumRes*l.PlaneLen:])
}

// encodeBF16Go is the portable bf16 kernel over full 32-element groups.
// It returns the escape list.
func encodeBF16Go(r8, planes []byte, plen int, esc, src []byte, groups int, base uint8, zero bool, crc uint32, _ mem) ([]byte, uint32) {
	var codeOf [256]uint8
	Window{Mode: b2m(zero), Base: base}.codes(&codeOf)
	k := len(esc)
	esc = growSlice(esc, 32*groups+8)
	e := esc[:cap(esc)]
	for g := 0; g < groups; g++ {
		s := src[64*g : 64*g+64]
		r := r8[32*g : 32*g+32]
		var p0, p1, p2 uint32
		for i := 0; i < 32; i++ {
			lo, hi := s[2*i], s[2*i+1]
			r[i] = hi&0x80 | lo&0x7f
			ex := hi<<1 | lo>>7
			c := uint32(codeOf[ex])
			e[k] = ex
			if c == 0 {
				k++
			}
			p0 |= (c & 1) << i
			p1 |= (c >> 1 & 1) << i
			p2 |= (c >> 2) << i
		}
		binary.LittleEndian.PutUint32(planes[4*g:], p0)
		binary.LittleEndian.PutUint32(planes[plen+4*g:], p1)
		binary.LittleEndian.PutUint32(planes[2*plen+4*g:], p2)
	}
	return e[:k], crc32c.Update(crc, src[:64*groups])
}

func b2m(zero bool) uint8 {
	if zero {
		return ModeZero
	}
	return ModePlain
}

func growSlice(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		return nb
	}
	return b
}

func encodeBF16(st, esc, src []byte, l *Layout, w Window, m mem) ([]byte, uint32) {
	return encodeBF16To(st[l.R8:l.R8+l.NP], st[l.Planes:l.Planes+3*l.PlaneLen], esc, src, l, w, m)
}

// encodeBF16To runs the bf16 kernels with the R8 array and the code planes
// given explicitly.
func encodeBF16To(r8, planes, esc, src []byte, l *Layout, w Window, m mem) ([]byte, uint32) {
	n := l.N
	full := n / 32
	esc, crc := active.encode(r8, planes, l.PlaneLen, esc, src[:64*full], full, w.Base, w.Mode == ModeZero, 0, m)
	if rem := n - 32*full; rem > 0 {
		var tmp [64]byte
		copy(tmp[:], src[64*full:2*n])
		// pad elements use a representable exponent so they create no escape
		var pad [2]byte
		if w.Mode == ModeZero {
			pad = [2]byte{0, 0}
		} else {
			v := uint16(w.Base) << 7
			pad = [2]byte{byte(v), byte(v >> 8)}
		}
		for i := rem; i < 32; i++ {
			tmp[2*i], tmp[2*i+1] = pad[0], pad[1]
		}
		var r [32]byte
		var pl [12]byte
		esc, _ = encodeBF16Go(r[:], pl[:], 4, esc, tmp[:], 1, w.Base, w.Mode == ModeZero, 0, mem{})
		copy(r8[32*full:], r[:rem])
		for j := 0; j < 3; j++ {
			copy(planes[j*l.PlaneLen+4*full:], pl[4*j:4*j+4])
		}
		crc = crc32c.Update(crc, src[64*full:2*n])
	}
	return esc, crc
}

// encodeGeneric handles every format one element at a time.
func (e *Encoder) encodeGeneric(st, esc, src []byte, s *spec, l *Layout) []byte {
	n := l.N
	fmask := uint32(1)<<s.expBits - 1
	nq := len(s.qbits)
	for g := 0; g*32 < n; g++ {
		var p [3]uint32
		var q [4]uint32
		m := n - 32*g
		if m > 32 {
			m = 32
		}
		for i := 0; i < m; i++ {
			idx := 32*g + i
			x := load(src, idx, s.size)
			field := x >> s.expShift & fmask
			c := uint32(e.codeOf[field])
			if c == 0 {
				esc = append(esc, byte(field))
			}
			p[0] |= (c & 1) << i
			p[1] |= (c >> 1 & 1) << i
			p[2] |= (c >> 2) << i
			switch {
			case s.r16: // fp32
				st[l.R8+idx] = byte(x>>24)&0x80 | byte(x>>16)&0x7f
				binary.LittleEndian.PutUint16(st[l.R16+2*idx:], uint16(x))
			case s.r8: // fp16 (bf16 has its own kernel)
				st[l.R8+idx] = byte(x)
			}
			for j := 0; j < nq; j++ {
				q[j] |= (x >> s.qbits[j] & 1) << i
			}
		}
		for j := 0; j < 3; j++ {
			binary.LittleEndian.PutUint32(st[l.Planes+j*l.PlaneLen+4*g:], p[j])
		}
		for j := 0; j < nq; j++ {
			binary.LittleEndian.PutUint32(st[l.ResPlanes+j*l.PlaneLen+4*g:], q[j])
		}
	}
	return esc
}

// Decoder holds per-block scratch state. The zero value is ready to use.
type Decoder struct {
	// Stream asks the bf16 kernel to write the output with non-temporal
	// stores where the CPU has them: for tensors much larger than the
	// cache, this saves the read-for-ownership of every output line and
	// keeps the frame cached.
	Stream bool
	// Ahead: as in Encoder, the distance from this block's static arrays
	// to the next block's.
	Ahead int

	codeOf [256]uint8
	expOf  [8]uint8
	sc     escScratch
	hi     []byte
	r8     []byte
}

// DecodeBlock reconstructs the n = len(dst)/size elements of a block from its
// static arrays st (len(st) must be StaticLen(f, n)) and its escape bytes esc
// (exactly the block's escapes) and returns the CRC-32C of dst. It returns
// an error wrapping ErrCorrupt if the block is inconsistent; it never reads
// or writes out of bounds.
func (d *Decoder) DecodeBlock(dst, st, esc []byte, f Format, w Window) (uint32, error) {
	if !f.valid() {
		return 0, fmt.Errorf("%w: unknown format %d", ErrCorrupt, f)
	}
	s := f.spec()
	n := len(dst) / s.size
	if n*s.size != len(dst) || n <= 0 || n > MaxBlock {
		return 0, fmt.Errorf("%w: bad block length %d", ErrCorrupt, len(dst))
	}
	l := BlockLayout(f, n)
	if len(st) != l.StaticLen {
		return 0, fmt.Errorf("%w: static block is %d bytes, want %d", ErrCorrupt, len(st), l.StaticLen)
	}
	if !w.Valid(f) {
		return 0, fmt.Errorf("%w: invalid window mode=%d base=%d", ErrCorrupt, w.Mode, w.Base)
	}
	if err := checkPad(st, &l); err != nil {
		return 0, err
	}
	w.tables(f, &d.codeOf, &d.expOf)
	var used int
	var crc uint32
	var err error
	switch f {
	case BF16:
		used, crc, err = decodeBF16(dst, st, esc, &l, w, &d.expOf, &d.codeOf, &d.sc, mem{nt: d.Stream, pf: d.Ahead})
	case FP32:
		d.hi = growTo(d.hi, 2*n)
		used, _, err = decodeBF16(d.hi[:2*n], st, esc, &l, w, &d.expOf, &d.codeOf, &d.sc, mem{pf: d.Ahead})
		if err == nil {
			JoinHalves(dst, d.hi[:2*n], st[l.R16:l.R16+2*n])
			crc = crc32c.Checksum(dst)
		}
	case FP16:
		d.hi = growTo(d.hi, 2*n)
		used, _, err = decodeBF16(d.hi[:2*n], st, esc, &l, w, &d.expOf, &d.codeOf, &d.sc, mem{pf: d.Ahead})
		if err == nil {
			if err = active.fromPseudo16(dst, d.hi[:2*n], st[l.ResPlanes:], l.PlaneLen); err == nil {
				crc = crc32c.Checksum(dst)
			}
		}
	case E5M2, E4M3:
		d.hi = growTo(d.hi, 2*n)
		d.r8 = growTo(d.r8, l.NP)
		clear(d.r8)
		used, _, err = decodeBF16From(d.hi[:2*n], d.r8, st[l.Planes:l.Planes+3*l.PlaneLen], esc, &l, w, &d.expOf, &d.codeOf, &d.sc, mem{})
		if err == nil {
			if err = fp8FromPseudo(dst, d.hi[:2*n], st[l.ResPlanes:], l.PlaneLen, s); err == nil {
				crc = crc32c.Checksum(dst)
			}
		}
	default:
		used, err = d.decodeGeneric(dst, st, esc, s, &l)
		crc = crc32c.Checksum(dst)
	}
	if err != nil {
		return 0, err
	}
	if used != len(esc) {
		return 0, fmt.Errorf("%w: block has %d escapes, index says %d", ErrCorrupt, used, len(esc))
	}
	return crc, nil
}

func checkPad(st []byte, l *Layout) error {
	n, np := l.N, l.NP
	bad := false
	if l.R8 >= 0 {
		bad = bad || !allZero(st[l.R8+n:l.R8+np])
	}
	if l.R16 >= 0 {
		bad = bad || !allZero(st[l.R16+2*n:l.R16+2*np])
	}
	g := (n + 31) / 32
	for j := 0; j < 3+l.NumRes; j++ {
		p := st[l.Planes+j*l.PlaneLen : l.Planes+(j+1)*l.PlaneLen]
		if n%32 != 0 {
			w := binary.LittleEndian.Uint32(p[4*(g-1):])
			bad = bad || w>>(n%32) != 0
		}
		bad = bad || !allZero(p[4*g:])
	}
	bad = bad || !allZero(st[l.ResPlanes+l.NumRes*l.PlaneLen:])
	if bad {
		return fmt.Errorf("%w: non-zero padding", ErrCorrupt)
	}
	return nil
}

func allZero(b []byte) bool {
	var acc byte
	for _, v := range b {
		acc |= v
	}
	return acc == 0
}

var errEscOverrun = fmt.Errorf("%w: more escapes than recorded", ErrCorrupt)
var errEscValue = fmt.Errorf("%w: escape holds a representable exponent", ErrCorrupt)

// decodeBF16Go is the portable bf16 decode kernel over full groups. It
// returns the number of escapes consumed, or -1 on overrun / non-canonical escape.
func decodeBF16Go(dst, r8, planes []byte, plen int, esc []byte, groups int, expOf *[8]uint8, codeOf *[256]uint8) int {
	k := 0
	for g := 0; g < groups; g++ {
		p0 := binary.LittleEndian.Uint32(planes[4*g:])
		p1 := binary.LittleEndian.Uint32(planes[plen+4*g:])
		p2 := binary.LittleEndian.Uint32(planes[2*plen+4*g:])
		r := r8[32*g : 32*g+32]
		o := dst[64*g : 64*g+64]
		if escm := ^(p0 | p1 | p2); escm != 0 {
			ne := bits.OnesCount32(escm)
			if ne > len(esc)-k {
				return -1
			}
			for _, ex := range esc[k : k+ne] {
				if codeOf[ex] != 0 {
					return -1
				}
			}
		}
		for i := 0; i < 32; i++ {
			c := p0>>i&1 | (p1>>i&1)<<1 | (p2>>i&1)<<2
			ex := expOf[c]
			if c == 0 {
				ex = esc[k]
				k++
			}
			sm := r[i]
			o[2*i] = ex<<7 | sm&0x7f
			o[2*i+1] = sm&0x80 | ex>>1
		}
	}
	return k
}

func decodeBF16(dst, st, esc []byte, l *Layout, w Window, expOf *[8]uint8, codeOf *[256]uint8, sc *escScratch, m mem) (int, uint32, error) {
	return decodeBF16From(dst, st[l.R8:l.R8+l.NP], st[l.Planes:l.Planes+3*l.PlaneLen], esc, l, w, expOf, codeOf, sc, m)
}

func decodeBF16From(dst, r8, planes, esc []byte, l *Layout, w Window, expOf *[8]uint8, codeOf *[256]uint8, sc *escScratch, m mem) (int, uint32, error) {
	n := l.N
	full := n / 32
	k, crc := active.decode(dst[:64*full], r8, planes, l.PlaneLen, esc, full, expOf, codeOf, w, sc, 0, m)
	if k < 0 {
		return 0, 0, errEscOverrun
	}
	if rem := n - 32*full; rem > 0 {
		// the padding bits are zero (checked), so treat them as non-escapes
		var pl [12]byte
		for j := 0; j < 3; j++ {
			copy(pl[4*j:4*j+4], planes[j*l.PlaneLen+4*full:])
		}
		// force padding codes to 1 so they do not consume escapes
		pad := ^uint32(0) << rem
		binary.LittleEndian.PutUint32(pl[0:], binary.LittleEndian.Uint32(pl[0:])|pad)
		var tmp [64]byte
		var r [32]byte
		copy(r[:], r8[32*full:32*full+rem])
		k2 := decodeBF16Go(tmp[:], r[:], pl[:], 4, esc[k:], 1, expOf, codeOf)
		if k2 < 0 {
			return 0, 0, errEscOverrun
		}
		k += k2
		copy(dst[64*full:], tmp[:2*rem])
		crc = crc32c.Update(crc, dst[64*full:2*n])
	}
	return k, crc, nil
}

func (d *Decoder) decodeGeneric(dst, st, esc []byte, s *spec, l *Layout) (int, error) {
	n := l.N
	nq := len(s.qbits)
	k := 0
	for g := 0; g*32 < n; g++ {
		var p [3]uint32
		var q [4]uint32
		for j := 0; j < 3; j++ {
			p[j] = binary.LittleEndian.Uint32(st[l.Planes+j*l.PlaneLen+4*g:])
		}
		for j := 0; j < nq; j++ {
			q[j] = binary.LittleEndian.Uint32(st[l.ResPlanes+j*l.PlaneLen+4*g:])
		}
		m := n - 32*g
		if m > 32 {
			m = 32
		}
		for i := 0; i < m; i++ {
			idx := 32*g + i
			c := p[0]>>i&1 | (p[1]>>i&1)<<1 | (p[2]>>i&1)<<2
			var field uint32
			if c == 0 {
				if k >= len(esc) {
					return 0, errEscOverrun
				}
				field = uint32(esc[k])
				k++
				if field>>s.expBits != 0 || d.codeOf[field] != 0 {
					return 0, errEscValue
				}
			} else {
				field = uint32(d.expOf[c])
			}
			x := field << s.expShift
			switch {
			case s.r16:
				r := uint32(st[l.R8+idx])
				x |= (r&0x80)<<24 | (r&0x7f)<<16 | uint32(binary.LittleEndian.Uint16(st[l.R16+2*idx:]))
			case s.r8:
				x |= uint32(st[l.R8+idx])
			}
			for j := 0; j < nq; j++ {
				x |= (q[j] >> i & 1) << s.qbits[j]
			}
			switch s.size {
			case 1:
				dst[idx] = byte(x)
			case 2:
				binary.LittleEndian.PutUint16(dst[2*idx:], uint16(x))
			default:
				binary.LittleEndian.PutUint32(dst[4*idx:], x)
			}
		}
	}
	return k, nil
}

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// SplitHalves stores the high and low 16 bits of each float32 of src.
func SplitHalves(hi, lo, src []byte) { active.split(hi, lo, src, 0) }

// JoinHalves is the inverse of SplitHalves.
func JoinHalves(dst, hi, lo []byte) { active.join(dst, hi, lo) }

func splitHalvesGo(hi, lo, src []byte, _ int) {
	n := len(src) / 4
	i := 0
	for ; i+2 <= n; i += 2 {
		x := binary.LittleEndian.Uint64(src[4*i:])
		binary.LittleEndian.PutUint32(hi[2*i:], uint32(x>>16&0xffff|x>>32&0xffff0000))
		binary.LittleEndian.PutUint32(lo[2*i:], uint32(x&0xffff|x>>16&0xffff0000))
	}
	for ; i < n; i++ {
		hi[2*i], hi[2*i+1] = src[4*i+2], src[4*i+3]
		lo[2*i], lo[2*i+1] = src[4*i], src[4*i+1]
	}
}

func joinHalvesGo(dst, hi, lo []byte) {
	n := len(dst) / 4
	i := 0
	for ; i+2 <= n; i += 2 {
		h := uint64(binary.LittleEndian.Uint32(hi[2*i:]))
		l := uint64(binary.LittleEndian.Uint32(lo[2*i:]))
		x := l&0xffff | (h&0xffff)<<16 | (l>>16)<<32 | (h>>16)<<48
		binary.LittleEndian.PutUint64(dst[4*i:], x)
	}
	for ; i < n; i++ {
		dst[4*i], dst[4*i+1], dst[4*i+2], dst[4*i+3] = lo[2*i], lo[2*i+1], hi[2*i], hi[2*i+1]
	}
}

// fp16ToPseudoGo writes the pseudo words and the residue planes of src.
func fp16ToPseudoGo(y, planes []byte, plen int, src []byte, _ int) {
	fp16ToPseudo(y, src)
	fp16ResiduePlanes(planes, plen, src)
}

// fp16ToPseudo maps float16 x to the bf16-shaped word
// (x&0x80)<<8 | field<<7 | x&0x7f, where field = bits 14..10 of x.
func fp16ToPseudo(y, src []byte) {
	n := len(src) / 2
	i := 0
	for ; i+4 <= n; i += 4 {
		x := binary.LittleEndian.Uint64(src[2*i:])
		v := (x&0x0080008000800080)<<8 | (x>>10&0x001f001f001f001f)<<7 | x&0x007f007f007f007f
		binary.LittleEndian.PutUint64(y[2*i:], v)
	}
	for ; i < n; i++ {
		x := uint16(src[2*i]) | uint16(src[2*i+1])<<8
		v := x&0x80<<8 | (x>>10&0x1f)<<7 | x&0x7f
		y[2*i], y[2*i+1] = byte(v), byte(v>>8)
	}
}

const (
	lsbs  = 0x0101010101010101
	gath8 = 0x0102040810204080 // (bytes' bit 0) * gath8 >> 56 packs them, byte k -> bit k
	sel8  = 0x8040201008040201
)

// highBytes8 returns the high bytes of the 8 float16 at s.
func highBytes8(s []byte) uint64 {
	a := binary.LittleEndian.Uint64(s) >> 8 & 0x00ff00ff00ff00ff
	c := binary.LittleEndian.Uint64(s[8:]) >> 8 & 0x00ff00ff00ff00ff
	a = (a | a>>8) & 0x0000ffff0000ffff
	c = (c | c>>8) & 0x0000ffff0000ffff
	return (a|a>>16)&0xffffffff | (c|c>>16)<<32
}

// fp16ResiduePlanes writes the planes of bits 8, 9 and 15 of each float16.
func fp16ResiduePlanes(planes []byte, plen int, src []byte) {
	n := len(src) / 2
	var tmp [64]byte
	for g := 0; 32*g < n; g++ {
		s := src[64*g:]
		if n-32*g < 32 {
			tmp = [64]byte{}
			copy(tmp[:], s[:2*(n-32*g)])
			s = tmp[:]
		}
		var q0, q1, q2 uint32
		for k := 0; k < 4; k++ {
			h := highBytes8(s[16*k:])
			q0 |= uint32((h&lsbs)*gath8>>56) << (8 * k)
			q1 |= uint32((h>>1&lsbs)*gath8>>56) << (8 * k)
			q2 |= uint32((h>>7&lsbs)*gath8>>56) << (8 * k)
		}
		binary.LittleEndian.PutUint32(planes[4*g:], q0)
		binary.LittleEndian.PutUint32(planes[plen+4*g:], q1)
		binary.LittleEndian.PutUint32(planes[2*plen+4*g:], q2)
	}
}

// spreadBits turns 8 bits into 8 bytes of 0 or 1 (bit k -> byte k).
func spreadBits(b uint32) uint64 {
	t := uint64(b&0xff) * lsbs & sel8
	return ((t & 0x7f7f7f7f7f7f7f7f) + 0x7f7f7f7f7f7f7f7f | t) >> 7 & lsbs
}

// fp16FromPseudo rebuilds float16 values from decoded pseudo words and the
// residue planes. A pseudo field above 31 cannot come from a valid block.
func fp16FromPseudo(dst, y, planes []byte, plen int) error {
	n := len(dst) / 2
	var bad uint64
	var tmp [64]byte
	for g := 0; 32*g < n; g++ {
		q0 := binary.LittleEndian.Uint32(planes[4*g:])
		q1 := binary.LittleEndian.Uint32(planes[plen+4*g:])
		q2 := binary.LittleEndian.Uint32(planes[2*plen+4*g:])
		yy := y[64*g:]
		o := dst[64*g:]
		m := n - 32*g
		if m < 32 {
			tmp = [64]byte{}
			copy(tmp[:], yy[:2*m])
			yy = tmp[:]
			o = make([]byte, 64)
		}
		for k := 0; k < 8; k++ { // 4 elements at a time
			v := binary.LittleEndian.Uint64(yy[8*k:])
			sh := uint(4 * k)
			// residue bits of these 4 elements, one per 16-bit lane
			r := spread4w(q0>>sh&15) | spread4w(q1>>sh&15)<<1 | spread4w(q2>>sh&15)<<7
			field := v >> 7 & 0x00ff00ff00ff00ff
			bad |= field
			lo := v&0x007f007f007f007f | v>>8&0x0080008000800080
			x := lo | (field<<2|r)<<8
			binary.LittleEndian.PutUint64(o[8*k:], x)
		}
		if m < 32 {
			copy(dst[64*g:], o[:2*m])
		}
	}
	if bad&0xffe0ffe0ffe0ffe0 != 0 {
		return errFieldRange
	}
	return nil
}

var errFieldRange = fmt.Errorf("%w: exponent field out of range", ErrCorrupt)

// spread4w puts bit k of b (k < 4) at bit 16k.
func spread4w(b uint32) uint64 {
	x := uint64(b)
	return x&1 | (x&2)<<15 | (x&4)<<30 | (x&8)<<45
}

// fp8ToPseudo writes the bf16-shaped word field<<7 for each float8.
func fp8ToPseudo(y, src []byte, s *spec) {
	n := len(src)
	fm := uint64(1)<<s.expBits - 1
	mask := fm * lsbs
	i := 0
	for ; i+8 <= n; i += 8 {
		f := binary.LittleEndian.Uint64(src[i:]) >> s.expShift & mask
		binary.LittleEndian.PutUint64(y[2*i:], spreadBytes(uint32(f))<<7)
		binary.LittleEndian.PutUint64(y[2*i+8:], spreadBytes(uint32(f>>32))<<7)
	}
	for ; i < n; i++ {
		v := uint16(uint64(src[i])>>s.expShift&fm) << 7
		y[2*i], y[2*i+1] = byte(v), byte(v>>8)
	}
}

// spreadBytes moves byte k of v to byte 2k (16-bit lanes).
func spreadBytes(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	return (x | x<<8) & 0x00ff00ff00ff00ff
}

// bytePlanes writes one plane per bit position in bits for the bytes of src.
func bytePlanes(planes []byte, plen int, src []byte, bitPos []uint) {
	n := len(src)
	var tmp [32]byte
	for g := 0; 32*g < n; g++ {
		s := src[32*g:]
		if n-32*g < 32 {
			tmp = [32]byte{}
			copy(tmp[:], s[:n-32*g])
			s = tmp[:]
		}
		for j, b := range bitPos {
			var q uint32
			for k := 0; k < 4; k++ {
				x := binary.LittleEndian.Uint64(s[8*k:])
				q |= uint32((x>>b&lsbs)*gath8>>56) << (8 * k)
			}
			binary.LittleEndian.PutUint32(planes[j*plen+4*g:], q)
		}
	}
}

// fp8FromPseudo rebuilds float8 bytes from decoded pseudo words (field<<7)
// and the residue planes.
func fp8FromPseudo(dst, y, planes []byte, plen int, s *spec) error {
	n := len(dst)
	var bad uint64
	var tmpY [64]byte
	var tmpO [32]byte
	for g := 0; 32*g < n; g++ {
		m := n - 32*g
		yy := y[64*g:]
		out := dst[32*g:]
		if m < 32 {
			tmpY = [64]byte{}
			copy(tmpY[:], yy[:2*m])
			yy, out = tmpY[:], tmpO[:]
		}
		var pw [4]uint32
		for j := range s.qbits {
			pw[j] = binary.LittleEndian.Uint32(planes[j*plen+4*g:])
		}
		for k := 0; k < 4; k++ { // 8 elements
			a := binary.LittleEndian.Uint64(yy[16*k:]) >> 7 & 0x00ff00ff00ff00ff
			c := binary.LittleEndian.Uint64(yy[16*k+8:]) >> 7 & 0x00ff00ff00ff00ff
			a = (a | a>>8) & 0x0000ffff0000ffff
			c = (c | c>>8) & 0x0000ffff0000ffff
			f := (a|a>>16)&0xffffffff | (c|c>>16)<<32
			bad |= f
			x := f << s.expShift
			for j, b := range s.qbits {
				x |= spreadBits(pw[j]>>(8*uint(k))) << b
			}
			binary.LittleEndian.PutUint64(out[8*k:], x)
		}
		if m < 32 {
			copy(dst[32*g:], tmpO[:m])
		}
	}
	if bad&^(lsbs*(uint64(1)<<s.expBits-1)) != 0 {
		return fmt.Errorf("%w: exponent field out of range", ErrCorrupt)
	}
	return nil
}
