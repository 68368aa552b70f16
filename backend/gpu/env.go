// Package gpu is the engine's path for CUDA tensors: NCCL underneath (loaded
// with dlopen, communicators set up through the c10d Store), the codec's
// CUDA kernels (libzipccl_cuda.so, also dlopen'ed, only where a GPU is) for
// compressed collectives, and the decision (plan.go) between NCCL, the
// coded path (the kernels code, the engine's own transport moves the
// frames: package comm runs it with this package's Device, DevCoder and
// Stage) and the host-staged path the shim runs through the CPU path.
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
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	_ "github.com/zipccl/zipccl/backend/cenv" // before defaultEnv reads ZIPCCL_GPU_PATH
	"github.com/zipccl/zipccl/backend/hosts"
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
	forced   string // ZIPCCL_GPU_PATH: nccl, coded or staged
	rdma     bool   // this host has an RDMA NIC NCCL may use
	query    atomic.Pointer[QueryFunc]

	dmu     sync.Mutex
	devices map[int]*Device // the coded path's, by device index
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
		host:      hosts.Machine(),
		identify:  identifyDevice,
		rdma:      hasRDMA(),
	}
	e.forced = parseForced(os.Getenv("ZIPCCL_GPU_PATH"))
	return e
}

// parseForced reads ZIPCCL_GPU_PATH: nccl, coded or staged ("host" is
// staged's old name); anything else, or nothing, lets the planner choose.
func parseForced(v string) string {
	p, _ := ParsePath(v)
	return p
}

// ParsePath reads a GPU path as ZIPCCL_GPU_PATH and the group option
// gpu_path name it: nccl, coded or staged ("host" is staged's old name);
// "" or "auto" is the planner's choice.
func ParsePath(v string) (string, error) {
	switch v = strings.ToLower(strings.TrimSpace(v)); v {
	case "nccl", "coded", "staged":
		return v, nil
	case "host":
		return "staged", nil
	case "", "auto":
		return "", nil
	}
	return "", fmt.Errorf("zipccl: gpu_path=%q: want nccl, coded, staged or auto", v)
}

// hasRDMA says whether NCCL could use an RDMA NIC here: an InfiniBand or
// RoCE device is present and NCCL is not told to use sockets.
func hasRDMA() bool {
	if os.Getenv("NCCL_IB_DISABLE") == "1" || strings.EqualFold(os.Getenv("NCCL_NET"), "socket") {
		return false
	}
	ents, err := os.ReadDir("/sys/class/infiniband")
	return err == nil && len(ents) > 0
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
	c := Caps{Rank: rank, Device: dev, Forced: e.forced, RDMA: e.rdma, Peer: topology.Peer{Host: e.host}}
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

// EnvConfig describes an Env other than the process's, for tests and tools
// that bring their own kernel library (such as its CPU emulation) and no
// NCCL.
type EnvConfig struct {
	Kernels *Kernels  // nil: none
	Host    string    // this process's host identity
	UUID    string    // its GPU's (ranks with the same UUID share a GPU)
	Query   QueryFunc // the shim's event query (nil: events count as complete)
	Forced  string    // as ZIPCCL_GPU_PATH
}

// NewEnv builds an Env from c.
func NewEnv(c EnvConfig) *Env {
	e := &Env{
		openNCCL: func() (ncclLib, error) { return nil, errors.New("NCCL is not available in this environment") },
		openKern: func() (*Kernels, error) {
			if c.Kernels == nil {
				return nil, errors.New("no CUDA kernel library in this environment")
			}
			return c.Kernels, nil
		},
		probeTopo: func() topology.Topology { return topology.Topology{} },
		host:      c.Host,
		identify:  func(int) (string, string, error) { return c.UUID, "", nil },
		forced:    parseForced(c.Forced),
	}
	if c.Query != nil {
		e.query.Store(&c.Query)
	}
	return e
}

// Serialize makes every call into k take one process-wide lock (the CPU
// emulation of the library is not reentrant).
func (k *Kernels) Serialize() { k.serial = true }

// WaitEvent waits until the shim's event behind handle completed (the
// point on the caller's stream after which an op's inputs are ready), or
// ctx ends. handle 0 means ready now.
func (e *Env) WaitEvent(ctx context.Context, handle uintptr) error {
	if handle == 0 {
		return nil
	}
	q := e.eventQuery()
	if q == nil {
		return nil
	}
	pause := minPause
	for {
		done, err := q(handle)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// WaitEventOf is env's WaitEvent (nil: the process's Env).
func WaitEventOf(env *Env, ctx context.Context, handle uintptr) error {
	if env == nil {
		env = defaultEnv
	}
	return env.WaitEvent(ctx, handle)
}
