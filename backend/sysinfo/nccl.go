package sysinfo

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*nccl_version_fn)(int*);

static void* zc_dlopen(const char* path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char* zc_dlerror(void) { return dlerror(); }
static int zc_nccl_version(void* h, int* v) {
	nccl_version_fn f = (nccl_version_fn)dlsym(h, "ncclGetVersion");
	if (!f) return -1;
	return f(v);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// probeNCCL loads NCCL (path first, then the system's libnccl.so.2) and
// asks for its version.
func probeNCCL(path string) NCCL {
	var lastErr string
	for _, p := range []string{path, "libnccl.so.2", "libnccl.so"} {
		if p == "" {
			continue
		}
		cp := C.CString(p)
		h := C.zc_dlopen(cp)
		C.free(unsafe.Pointer(cp))
		if h == nil {
			lastErr = C.GoString(C.zc_dlerror())
			continue
		}
		var v C.int
		n := NCCL{Found: true, Path: p}
		if C.zc_nccl_version(h, &v) == 0 {
			// NCCL encodes 2.19.3 as 21903 (major*10000 + minor*100 + patch).
			n.Version = fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
		}
		// The handle stays open: unloading NCCL is not supported anyway.
		return n
	}
	return NCCL{Error: lastErr}
}
