//go:build !amd64 || purego

package zip3

// HasAVX512 and HasAVX2 are false without the assembly kernels.
const (
	HasAVX512 = false
	HasAVX2   = false
)

// Kernels lists the usable bf16 kernel sets: only the portable one here.
func Kernels() []string { return []string{"go"} }

// UseKernel selects a kernel set by name; only "go" exists here.
func UseKernel(name string) (restore func()) { return UsePortable() }
