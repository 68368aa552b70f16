// Package elems reads and writes element i of a little-endian buffer of
// size-byte elements as a uint64 bit pattern: the one-element-at-a-time
// access of the tests' scalar references.
package elems

import "encoding/binary"

// Load returns element i (size 1, 2, 4 or 8 bytes), zero-extended.
func Load(b []byte, size, i int) uint64 {
	switch size {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return binary.LittleEndian.Uint64(b[8*i:])
}

// Store writes the low size bytes of v as element i.
func Store(b []byte, size, i int, v uint64) {
	switch size {
	case 1:
		b[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
}
