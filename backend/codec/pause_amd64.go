//go:build !purego

package codec

// pause is 30 PAUSE instructions: the spin-wait hint, which spares the
// core's execution units (and a sibling hardware thread) while a goroutine
// waits a few microseconds for another.
//
//go:noescape
func pause()
