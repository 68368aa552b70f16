// dlopen for the libraries the GPU path finds at run time (NCCL, the CUDA
// kernels): one helper for both cgo preambles.
#pragma once
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

// zc_dlopen opens path; on failure it returns NULL with dlerror's text in err.
static inline void* zc_dlopen(const char* path, char* err, size_t errlen) {
	void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char* e = dlerror();
		strncpy(err, e ? e : "dlopen failed", errlen - 1);
		err[errlen - 1] = 0;
	}
	return h;
}
