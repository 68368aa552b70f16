//go:build !amd64 || purego

package crc32c

const useFold = false

func fold(p *byte, n int, s uint32, k *[10]uint64, out *[16]byte) { panic("unreachable") }

// SetFold is a no-op without the folding kernel.
func SetFold(on bool) bool { return false }
