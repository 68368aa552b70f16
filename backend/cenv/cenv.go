// Package cenv keeps the Go runtime's view of the environment in step with
// the process's C environment.
//
// The runtime of a c-shared library copies the environment block it was
// loaded with, but variables a program adds later (Python's os.environ
// calls setenv) go to the C environment only: ZIPCCL_CUDA_LIB or RANK set
// by a script before init_process_group, or by a launcher in a spawned
// child, were invisible to os.Getenv. Packages that read the environment at
// initialisation import this one, so that it runs first (the shim loads the
// engine holding Python's GIL); zc_info, also called under the GIL, syncs
// again. zc_comm_create does not: it runs without the GIL, and walking the
// C environment while another thread's setenv moves it is unsafe.
package cenv

/*
#include <stdlib.h>
extern char** environ;
static const char* zc_environ_at(size_t i) { return environ[i]; }
*/
import "C"

import (
	"os"
	"strings"
)

func init() { Sync() }

// Sync copies the engine's variables (ZIPCCL_*, NCCL_*, MASTER_ADDR, RANK)
// from the C environment into Go's where they differ. Variables removed
// from the C environment stay as Go last saw them.
func Sync() {
	for i := C.size_t(0); ; i++ {
		p := C.zc_environ_at(i)
		if p == nil {
			return
		}
		kv := C.GoString(p)
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !wanted(k) {
			continue
		}
		if cur, set := os.LookupEnv(k); !set || cur != v {
			_ = os.Setenv(k, v)
		}
	}
}

func wanted(k string) bool {
	return strings.HasPrefix(k, "ZIPCCL_") || strings.HasPrefix(k, "NCCL_") || k == "MASTER_ADDR" || k == "RANK"
}
