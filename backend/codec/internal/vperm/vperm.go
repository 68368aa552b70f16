// Package vperm moves bytes between one buffer and two: the codec's
// float32 half split and join and its float16 byte split and merge. The
// AVX-512 kernels use 64-byte two-table permutes (VBMI `VPERMT2B`) on
// index tables the caller passes; the AVX2 kernels pack and unpack bytes
// or 16-bit words. Callers check bounds and handle the tail that is not a
// whole step. Only amd64 has it; callers select it with the CPU's
// features.
package vperm

// Table is a VPERMT2B index table: entry k picks byte k of the result from
// a 128-byte pair of registers (0-63 the first, 64-127 the second).
type Table = [64]byte
