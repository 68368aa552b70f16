package sysinfo

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// probeGPUs asks the driver through NVML. go-nvml loads libnvidia-ml at run
// time, so a machine without the driver reports no GPUs instead of failing.
func probeGPUs() (gpus []GPU, driver, errText string) {
	gpus = []GPU{}
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return gpus, "", nvml.ErrorString(ret)
	}
	defer nvml.Shutdown()
	driver, _ = nvml.SystemGetDriverVersion()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return gpus, driver, nvml.ErrorString(ret)
	}
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := GPU{Index: i}
		g.Name, _ = d.GetName()
		g.UUID, _ = d.GetUUID()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryMB = mem.Total >> 20
		}
		gpus = append(gpus, g)
	}
	return gpus, driver, ""
}
