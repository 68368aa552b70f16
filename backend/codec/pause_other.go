//go:build !amd64 || purego

package codec

// pause: no spin-wait hint here; the caller's loop spins.
func pause() {}
