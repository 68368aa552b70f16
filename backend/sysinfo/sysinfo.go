// Package sysinfo describes the machine for `python -m zipccl info` and the
// logs: CPU SIMD features (klauspost/cpuid), the GPUs the NVIDIA driver
// reports (go-nvml, loaded at run time so no driver means "no GPUs"), and
// whether an NCCL library can be loaded.
package sysinfo

import (
	"runtime"

	"github.com/klauspost/cpuid/v2"
)

// CPU is the processor and the SIMD features the engine cares about.
type CPU struct {
	Brand    string   `json:"brand"`
	Cores    int      `json:"logical_cores"`
	Features []string `json:"features"`
}

// GPU is one device seen by the driver.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	MemoryMB uint64 `json:"memory_mb"`
}

// NCCL says whether (and where) an NCCL library was loaded.
type NCCL struct {
	Found   bool   `json:"found"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Info is everything `zipccl info` prints.
type Info struct {
	ZipcclVersion string `json:"zipccl_version"`
	GoVersion     string `json:"go_version"`
	CPU           CPU    `json:"cpu"`
	GPUs          []GPU  `json:"gpus"`
	GPUError      string `json:"gpu_error,omitempty"`
	Driver        string `json:"driver_version,omitempty"`
	NCCL          NCCL   `json:"nccl"`
}

// simd lists the features reported, in this order.
var simd = []cpuid.FeatureID{
	cpuid.SSE2, cpuid.SSE4, cpuid.SSE42, cpuid.AVX, cpuid.AVX2, cpuid.F16C, cpuid.FMA3,
	cpuid.BMI1, cpuid.BMI2, cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL,
	cpuid.AVX512VBMI, cpuid.AVX512VBMI2, cpuid.AVX512BF16, cpuid.GFNI, cpuid.CLMUL,
	cpuid.VPCLMULQDQ, cpuid.ASIMD, cpuid.SVE,
}

// ProbeCPU reports the CPU.
func ProbeCPU() CPU {
	c := CPU{Brand: cpuid.CPU.BrandName, Cores: runtime.NumCPU(), Features: []string{}}
	for _, f := range simd {
		if cpuid.CPU.Supports(f) {
			c.Features = append(c.Features, f.String())
		}
	}
	return c
}

// Probe gathers everything. ncclPath is the library to try first (torch's
// wheel ships one); empty means the system's.
func Probe(version, ncclPath string) Info {
	info := Info{ZipcclVersion: version, GoVersion: runtime.Version(), CPU: ProbeCPU()}
	info.GPUs, info.Driver, info.GPUError = probeGPUs()
	info.NCCL = probeNCCL(ncclPath)
	return info
}
