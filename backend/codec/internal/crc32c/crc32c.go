// Package crc32c computes CRC-32C (Castagnoli), the checksum of every codec
// block. It equals hash/crc32 with the Castagnoli table; on CPUs with
// AVX-512 and VPCLMULQDQ long inputs are folded 256 bytes at a time with
// carry-less multiplies (several times faster than the CRC32 instruction),
// and the last bytes go through hash/crc32.
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// foldMin is the shortest input sent to the folding kernel.
const foldMin = 1024

// Checksum returns the CRC-32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }

// Update returns the CRC-32C of the bytes whose CRC-32C is crc followed by p
// (as hash/crc32.Update with the Castagnoli table).
func Update(crc uint32, p []byte) uint32 {
	if useFold && len(p) >= foldMin {
		n := len(p) &^ 255
		var f [16]byte
		fold(&p[0], n, ^crc, &consts, &f)
		return crc32.Update(FromFold(&f), table, p[n:])
	}
	return crc32.Update(crc, table, p)
}

// Fold constants: for a shift by D bits, (x^(D+63) mod P, x^(D-1) mod P),
// bit-reflected into 64 bits, for D = 2048, 512, 384, 256, 128.
var consts [10]uint64

func init() {
	for i, d := range []int{2048, 512, 384, 256, 128} {
		consts[2*i] = reflect64(xpow(d + 63))
		consts[2*i+1] = reflect64(xpow(d - 1))
	}
}

// xpow returns x^n mod P (P = 0x1EDC6F41 with the x^32 term), normal bit order.
func xpow(n int) uint32 {
	const poly = 0x1EDC6F41
	r := uint32(1)
	for i := 0; i < n; i++ {
		hi := r & 0x80000000
		r <<= 1
		if hi != 0 {
			r ^= poly
		}
	}
	return r
}

// reflect64 maps a polynomial of degree < 32 (bit i = coefficient of x^i)
// to a 64-bit value whose bit j is the coefficient of x^(63-j).
func reflect64(q uint32) uint64 {
	var v uint64
	for i := 0; i < 32; i++ {
		if q>>i&1 != 0 {
			v |= 1 << (63 - i)
		}
	}
	return v
}

// FoldK returns the two fold constants for a shift by d bits (d >= 64), in
// the order the folding kernels use them (low qword, high qword).
func FoldK(d int) [2]uint64 {
	return [2]uint64{reflect64(xpow(d + 63)), reflect64(xpow(d - 1))}
}

// FromFold turns a 16-byte fold (see the kernels) into a CRC-32C value that
// Update can continue.
// (Byte-wise table loop: f does not escape, so callers do not allocate.)
func FromFold(f *[16]byte) uint32 {
	var c uint32 // raw CRC state 0 = crc32.Update(0xffffffff, ...)
	for _, b := range f {
		c = table[byte(c)^b] ^ c>>8
	}
	return ^c
}

// HasFold reports whether the carry-less multiply kernels run on this CPU.
func HasFold() bool { return useFold }
