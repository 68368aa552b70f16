package gpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_device_get_fn)(int*, int);
typedef int (*cu_uuid_fn)(unsigned char*, int);
typedef int (*cu_bus_fn)(char*, int, int);

// The CUDA driver API (libcuda, present wherever a GPU is), only to name a
// device: its UUID and PCI bus id, as NVML names GPUs. Ordinals are the
// runtime's (CUDA_VISIBLE_DEVICES applies).
static int zc_cu_identify(int ordinal, unsigned char uuid[16], char* bus, int buslen) {
	static void* h = 0;
	if (!h) h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) return -1;
	cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
	cu_device_get_fn get = (cu_device_get_fn)dlsym(h, "cuDeviceGet");
	cu_uuid_fn uid = (cu_uuid_fn)dlsym(h, "cuDeviceGetUuid_v2");
	if (!uid) uid = (cu_uuid_fn)dlsym(h, "cuDeviceGetUuid");
	cu_bus_fn pci = (cu_bus_fn)dlsym(h, "cuDeviceGetPCIBusId");
	if (!init || !get || !uid || !pci) return -2;
	int rc = init(0);
	if (rc) return rc;
	int dev = 0;
	if ((rc = get(&dev, ordinal))) return rc;
	if ((rc = uid(uuid, dev))) return rc;
	return pci(bus, buslen, dev);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// identifyDevice returns the UUID ("GPU-xxxxxxxx-xxxx-...") and PCI bus id
// of CUDA device ordinal, or an error without a driver.
func identifyDevice(ordinal int) (uuid, bus string, err error) {
	var u [16]C.uchar
	var b [64]C.char
	if rc := C.zc_cu_identify(C.int(ordinal), &u[0], &b[0], C.int(len(b))); rc != 0 {
		if rc == -1 {
			return "", "", fmt.Errorf("libcuda.so.1 cannot be loaded")
		}
		return "", "", fmt.Errorf("CUDA driver error %d naming device %d", int(rc), ordinal)
	}
	x := unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), 16)
	uuid = fmt.Sprintf("GPU-%x-%x-%x-%x-%x", x[0:4], x[4:6], x[6:8], x[8:10], x[10:16])
	return uuid, C.GoString(&b[0]), nil
}
