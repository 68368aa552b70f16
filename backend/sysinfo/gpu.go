package sysinfo

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/zipccl/zipccl/backend/topology"
)

// probeGPUs asks the driver through NVML (package topology). go-nvml loads
// libnvidia-ml at run time, so a machine without the driver reports no GPUs
// instead of failing.
func probeGPUs() topology.Topology {
	return topology.Probe(nvml.New())
}
