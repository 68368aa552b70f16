package codec

import (
	"encoding/binary"

	"github.com/zipccl/zipccl/backend/codec/zip3"
)

// Huff splits each element into an 8-bit symbol (coded) and residue bytes
// (kept raw in the static part):
//
//	bf16: symbol = exponent byte (bits 7..14); R8 = sign<<7 | mantissa (7 bits)
//	fp32: symbol = exponent byte (bits 23..30); R8 = sign<<7 | mantissa bits 16..22;
//	      R16 = low 16 bits
//	fp16: symbol = high byte (sign, 5 exponent bits, 2 mantissa bits); R8 = low byte
//	fp8:  symbol = the whole byte; no residue
//
// The split functions write len(src)/size elements; the merge functions are
// their inverse. The SIMD versions are installed by split_amd64.go.
var (
	splitBF16 = splitBF16Go
	mergeBF16 = mergeBF16Go
	symsBF16  = symsBF16Go
	splitFP16 = splitFP16Go
	mergeFP16 = mergeFP16Go
)

func splitBF16Go(r8, syms, src []byte) {
	n := len(src) / 2
	r8, syms = r8[:n], syms[:n]
	for i := range syms {
		x := binary.LittleEndian.Uint16(src[2*i:])
		r8[i] = byte(x>>8)&0x80 | byte(x)&0x7f
		syms[i] = byte(x >> 7)
	}
}

func symsBF16Go(syms, src []byte) {
	n := len(src) / 2
	syms = syms[:n]
	for i := range syms {
		syms[i] = byte(binary.LittleEndian.Uint16(src[2*i:]) >> 7)
	}
}

// mergeBF16CRC is mergeBF16 that also returns the CRC-32C of dst, in one
// pass where a kernel set has it; nt lets it write dst past the caches.
var mergeBF16CRC = mergeBF16CRCGo

func mergeBF16CRCGo(dst, r8, syms []byte, _ bool) uint32 {
	mergeBF16(dst, r8, syms)
	return crc(dst)
}

// mergeFP32CRC rebuilds float32 block dst from huff2's four byte planes
// (section 4a) and returns its CRC-32C, in one pass where a kernel set has
// it; nt lets it write dst past the caches.
var mergeFP32CRC = mergeFP32CRCGo

func mergeFP32CRCGo(dst []byte, pl *[4][]byte, _ bool) uint32 {
	mergeFP32Planes(dst, pl, 0)
	return crc(dst)
}

// mergeFP32Planes writes the elements from i0 on of dst from the planes:
// bytes p3, p2, then the high half as mergeBF16 builds it.
func mergeFP32Planes(dst []byte, pl *[4][]byte, i0 int) {
	n := len(dst) / 4
	p0, p1, p2, p3 := pl[0][i0:i0+n], pl[1][i0:i0+n], pl[2][i0:i0+n], pl[3][i0:i0+n]
	for i := range p0 {
		r, e := uint32(p1[i]), uint32(p0[i])
		binary.LittleEndian.PutUint32(dst[4*i:], r&0x80<<24|e<<23|r&0x7f<<16|uint32(p2[i])<<8|uint32(p3[i]))
	}
}

// mergeFP32WCRC is mergeFP32 (huff's float32: R8, R16 and the symbols, hi
// the scratch of the high halves) returning the CRC-32C of dst; mergeFP16CRC is mergeFP16 likewise. One
// pass where a kernel set has them; nt lets them write dst past the caches.
var (
	mergeFP32WCRC = mergeFP32WCRCGo
	mergeFP16CRC  = mergeFP16CRCGo
)

func mergeFP32WCRCGo(dst, r8, r16, syms []byte, hi *[]byte, _ bool) uint32 {
	mergeFP32(dst, r8, r16, syms, hi)
	return crc(dst)
}

func mergeFP16CRCGo(dst, r8, syms []byte, _ bool) uint32 {
	mergeFP16(dst, r8, syms)
	return crc(dst)
}

func mergeBF16Go(dst, r8, syms []byte) {
	n := len(dst) / 2
	r8, syms = r8[:n], syms[:n]
	for i := range syms {
		r, e := uint16(r8[i]), uint16(syms[i])
		binary.LittleEndian.PutUint16(dst[2*i:], r&0x80<<8|e<<7|r&0x7f)
	}
}

// fp32 goes through the bf16 kernels: its high half is a bfloat16 with the
// same exponent byte and the same R8 byte; the low half is R16.
func splitFP32(r8, r16, syms, src []byte, hi *[]byte) {
	n := len(src) / 4
	*hi = growBuf(*hi, 2*n)
	zip3.SplitHalves((*hi)[:2*n], r16[:2*n], src)
	splitBF16(r8[:n], syms[:n], (*hi)[:2*n])
}

func symsFP32(syms, src []byte) {
	n := len(src) / 4
	syms = syms[:n]
	for i := range syms {
		syms[i] = byte(binary.LittleEndian.Uint32(src[4*i:]) >> 23)
	}
}

func mergeFP32(dst, r8, r16, syms []byte, hi *[]byte) {
	n := len(dst) / 4
	*hi = growBuf(*hi, 2*n)
	mergeBF16((*hi)[:2*n], r8[:n], syms[:n])
	zip3.JoinHalves(dst, (*hi)[:2*n], r16[:2*n])
}

func growBuf(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// fp16 (de)interleaves the low and high bytes, eight bytes at a time.
func splitFP16Go(r8, syms, src []byte) {
	n := len(src) / 2
	r8, syms = r8[:n], syms[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		x := binary.LittleEndian.Uint64(src[2*i:])
		binary.LittleEndian.PutUint32(r8[i:], pack4(x))
		binary.LittleEndian.PutUint32(syms[i:], pack4(x>>8))
	}
	for ; i < n; i++ {
		r8[i] = src[2*i]
		syms[i] = src[2*i+1]
	}
}

// pack4 gathers bytes 0, 2, 4, 6 of x.
func pack4(x uint64) uint32 {
	x &= 0x00ff00ff00ff00ff
	x = (x | x>>8) & 0x0000ffff0000ffff
	return uint32(x | x>>16)
}

// spread4 is the inverse of pack4 (into bytes 0, 2, 4, 6).
func spread4(v uint32) uint64 {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	return (x | x<<8) & 0x00ff00ff00ff00ff
}

func symsFP16(syms, src []byte) {
	n := len(src) / 2
	syms = syms[:n]
	for i := range syms {
		syms[i] = src[2*i+1]
	}
}

func mergeFP16Go(dst, r8, syms []byte) {
	n := len(dst) / 2
	r8, syms = r8[:n], syms[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		x := spread4(binary.LittleEndian.Uint32(r8[i:])) | spread4(binary.LittleEndian.Uint32(syms[i:]))<<8
		binary.LittleEndian.PutUint64(dst[2*i:], x)
	}
	for ; i < n; i++ {
		dst[2*i] = r8[i]
		dst[2*i+1] = syms[i]
	}
}

// huffSplit writes the residue arrays of block src into st (huffStatic bytes,
// padding zeroed) and its symbols into syms. For fp8 the
// symbols are src itself and the returned slice aliases it.
func huffSplit(f zip3.Format, st, syms, src []byte, hi *[]byte) []byte {
	switch f {
	case zip3.BF16:
		n := len(src) / 2
		splitBF16(st[:n], syms[:n], src)
		clear(st[n:])
		return syms[:n]
	case zip3.FP32:
		n := len(src) / 4
		np := len(st) / 3
		splitFP32(st[:n], st[np:np+2*n], syms[:n], src, hi)
		clear(st[n:np])
		clear(st[np+2*n:])
		return syms[:n]
	case zip3.FP16:
		n := len(src) / 2
		splitFP16(st[:n], syms[:n], src)
		clear(st[n:])
		return syms[:n]
	}
	return src
}

// huffSyms extracts only the symbols of block src.
func huffSyms(f zip3.Format, syms, src []byte) []byte {
	switch f {
	case zip3.BF16:
		symsBF16(syms, src)
		return syms[:len(src)/2]
	case zip3.FP32:
		symsFP32(syms, src)
		return syms[:len(src)/4]
	case zip3.FP16:
		symsFP16(syms, src)
		return syms[:len(src)/2]
	}
	return src
}
