// Package sysinfo describes the machine for `python -m zipccl info` and the
// logs: CPU SIMD features (klauspost/cpuid), the GPUs the NVIDIA driver
// reports (go-nvml, loaded at run time so no driver means "no GPUs"), and
// whether an NCCL library can be loaded.
package sysinfo

import (
	"os"
	"runtime"

	"github.com/klauspost/cpuid/v2"

	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/topology"
)

// CPU is the processor and the SIMD features the engine cares about.
type CPU struct {
	Brand    string   `json:"brand"`
	Cores    int      `json:"logical_cores"`
	Features []string `json:"features"`
}

// GPU is one device seen by the driver (index, name, uuid, memory_mb,
// pci_bus_id, nvlinks, nvswitch).
type GPU = topology.GPU

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
	// GPULinks: one entry per pair of GPUs, NVLink (direct, through an
	// NVSwitch, or by the P2P capability) or PCIe (with its level).
	GPULinks []topology.Link `json:"gpu_links"`
	GPUError string          `json:"gpu_error,omitempty"`
	Driver   string          `json:"driver_version,omitempty"`
	HostID   string          `json:"host_id"`
	NCCL     NCCL            `json:"nccl"`
	// Kernels is the CUDA kernel library (libzipccl_cuda.so) the GPU path
	// would load; it is loaded (and checked) only on a machine with GPUs.
	Kernels Kernels `json:"cuda_kernels"`
}

// Kernels says where libzipccl_cuda.so is and whether it loads.
type Kernels struct {
	Path   string `json:"path,omitempty"`
	Loaded bool   `json:"loaded"`
	Error  string `json:"error,omitempty"`
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
	info := Info{ZipcclVersion: version, GoVersion: runtime.Version(), CPU: ProbeCPU(), HostID: hosts.ID()}
	topo := probeGPUs()
	info.GPUs, info.GPULinks, info.Driver, info.GPUError = topo.GPUs, topo.SortedLinks(), topo.Driver, topo.Error
	info.NCCL = probeNCCL(ncclPath)
	info.Kernels.Path = os.Getenv("ZIPCCL_CUDA_LIB")
	if KernelsProbe != nil {
		info.Kernels = KernelsProbe(len(info.GPUs) > 0)
	}
	return info
}

// KernelsProbe, when set (by the GPU path's package), reports the kernel
// library; haveGPU says whether the driver reported any GPU (the library is
// loaded only then).
var KernelsProbe func(haveGPU bool) Kernels
