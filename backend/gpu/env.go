// Package gpu is the engine's path for CUDA tensors: NCCL underneath (loaded
// with dlopen, communicators set up through the c10d Store), the codec's
// CUDA kernels (libzipccl_cuda.so, also dlopen'ed, only where a GPU is) for
// compressed collectives, and the decision, agreed by every rank, between
// that and the host-staged fallback the shim runs through the CPU path.
//
// The engine has no CUDA runtime of its own. The shim hands every op a CUDA
// stream (ordered after the caller's stream) and an end event it records
// after the op; this package enqueues the op on the stream from the
// submitting thread (whose current device the shim set), then watches the
// end event through the shim's query callback and completes the op when the
// event completes, or fails it (and aborts the NCCL communicators) when its
// deadline passes or NCCL reports an asynchronous error.
package gpu

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	_ "github.com/zipccl/zipccl/backend/cenv" // before defaultEnv reads ZIPCCL_GPU_PATH
	"github.com/zipccl/zipccl/backend/topology"
)

// Env is the process-wide side of the GPU path: libraries and the host's
// topology, each loaded once, on first use.
type Env struct {
	ncclOnce  sync.Once
	nccl      ncclLib
	ncclErr   error
	openNCCL  func() (ncclLib, error)
	kOnce     sync.Once
	kernels   *Kernels
	kernelErr error
	openKern  func() (*Kernels, error)
	topoOnce  sync.Once
	topo      topology.Topology
	probeTopo func() topology.Topology

	host     string
	identify func(device int) (uuid, bus string, err error)
	forced   string // ZIPCCL_GPU_PATH=staged
	query    atomic.Pointer[QueryFunc]
}

// QueryFunc reports whether the end event behind a zc_op's done handle has
// completed (false while it is pending or not yet recorded).
type QueryFunc func(done uintptr) (bool, error)

var defaultEnv = newDefaultEnv()

func newDefaultEnv() *Env {
	e := &Env{
		openNCCL: func() (ncclLib, error) {
			lib, err := loadNCCL(ncclCandidates())
			if err != nil {
				return nil, err
			}
			return lib, nil
		},
		openKern: func() (*Kernels, error) {
			k, err := OpenKernels(kernelsCandidate())
			if err != nil {
				return nil, err
			}
			if k.DeviceCount() < 1 {
				return nil, fmt.Errorf("%s sees no CUDA device", k.Path())
			}
			return k, nil
		},
		probeTopo: func() topology.Topology { return topology.Probe(nvml.New()) },
		host:      topology.HostID(),
		identify:  identifyDevice,
	}
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv("ZIPCCL_GPU_PATH"))); v {
	case "staged", "host":
		e.forced = "ZIPCCL_GPU_PATH=" + v
	}
	return e
}

// SetEventQuery installs the shim's end-event query (zc_init_device).
func SetEventQuery(f QueryFunc) { defaultEnv.query.Store(&f) }

func (e *Env) eventQuery() QueryFunc {
	if f := e.query.Load(); f != nil {
		return *f
	}
	return nil
}

// NCCL loads NCCL once.
func (e *Env) NCCL() (ncclLib, error) {
	e.ncclOnce.Do(func() { e.nccl, e.ncclErr = e.openNCCL() })
	return e.nccl, e.ncclErr
}

// Kernels loads the CUDA kernel library once. Call it only once a CUDA
// tensor exists (so a GPU does).
func (e *Env) Kernels() (*Kernels, error) {
	e.kOnce.Do(func() { e.kernels, e.kernelErr = e.openKern() })
	return e.kernels, e.kernelErr
}

// Topology probes NVML once.
func (e *Env) Topology() topology.Topology {
	e.topoOnce.Do(func() { e.topo = e.probeTopo() })
	return e.topo
}

// caps describes this process for CUDA device dev.
func (e *Env) caps(rank, dev int) Caps {
	c := Caps{Rank: rank, Device: dev, Staged: e.forced, Peer: topology.Peer{Host: e.host}}
	if lib, err := e.NCCL(); err != nil {
		c.NCCLError = err.Error()
	} else {
		c.NCCLVersion = lib.Version()
	}
	if _, err := e.Kernels(); err != nil {
		c.KernelsErr = err.Error()
	} else {
		c.Kernels = true
	}
	if e.identify != nil {
		if uuid, bus, err := e.identify(dev); err == nil {
			c.Peer.UUID, c.Peer.BusID = uuid, bus
		}
	}
	return c
}

// ProbeKernels reports the kernel library for `zipccl info`: loaded only
// when haveGPU.
func ProbeKernels(haveGPU bool) (path string, loaded bool, errText string) {
	path = kernelsCandidate()
	if !haveGPU {
		return path, false, "not loaded: no GPU"
	}
	k, err := defaultEnv.Kernels()
	if err != nil {
		return path, false, err.Error()
	}
	return k.Path(), true, ""
}

// Error is a failed device op; Code is a comm.Code value (the C ABI's
// ZC_ERR_*).
type Error struct {
	Code int32
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Codes (comm.Code values).
const (
	CodeInvalid  int32 = 1
	CodeComm     int32 = 2
	CodeTimeout  int32 = 3
	CodeInternal int32 = 5
)

// codeOf classifies err for a message that names it.
func codeOf(err error) int32 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeComm
}
