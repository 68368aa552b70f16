package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/topology"
)

// ---------------------------------------------------------------------------
// Loading libraries that are not there.

func TestLoadNCCLMissingIsAnError(t *testing.T) {
	_, err := loadNCCL([]string{"/nonexistent/libnccl.so.2"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") || !strings.Contains(err.Error(), "NCCL is not available") {
		t.Fatalf("missing NCCL: %v", err)
	}
	// A library that is not NCCL.
	_, err = loadNCCL([]string{"libc.so.6"})
	if err == nil || !strings.Contains(err.Error(), "does not export nccl") {
		t.Fatalf("libc as NCCL: %v", err)
	}
	if _, err := loadNCCL(nil); err == nil {
		t.Fatal("no candidates: no error")
	}
}

func TestNCCLCandidatesHonourEnv(t *testing.T) {
	t.Setenv("ZIPCCL_NCCL_LIB", "/nowhere/libnccl.so.2")
	if c := ncclCandidates(); len(c) != 1 || c[0] != "/nowhere/libnccl.so.2" {
		t.Fatalf("candidates %v: ZIPCCL_NCCL_LIB must be the only one (so that pointing it nowhere forces the staged path)", c)
	}
	t.Setenv("ZIPCCL_NCCL_LIB", "")
	if c := ncclCandidates(); len(c) != 2 || c[0] != "libnccl.so.2" {
		t.Fatalf("default candidates %v", c)
	}
}

// torch's wheel ships an NCCL; where it is installed, it loads, reports its
// version and draws unique ids (which need no GPU). Creating a communicator
// needs one, and fails cleanly here.
func TestRealNCCLWithoutGPU(t *testing.T) {
	path := os.Getenv("ZIPCCL_TEST_NCCL_LIB")
	if path == "" {
		matches, _ := filepath.Glob("/root/.pyenv/versions/*/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2")
		if len(matches) == 0 {
			matches, _ = filepath.Glob("/usr/local/lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2")
		}
		if len(matches) == 0 {
			t.Skip("no libnccl.so.2 from torch's wheel here (set ZIPCCL_TEST_NCCL_LIB)")
		}
		path = matches[0]
	}
	lib, err := loadNCCL([]string{path})
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	if lib.Version() < 20700 {
		t.Fatalf("version %d", lib.Version())
	}
	t.Logf("NCCL %s from %s", versionString(lib.Version()), path)
	a, err := lib.UniqueID()
	if err != nil {
		t.Fatalf("ncclGetUniqueId: %v", err)
	}
	b, _ := lib.UniqueID()
	if a == b || a == (UniqueID{}) {
		t.Fatal("unique ids are not unique")
	}
	if os.Getenv("ZIPCCL_TEST_HAVE_GPU") == "" {
		if err := identifyDeviceErr(0); err == nil {
			t.Skip("a GPU is present: the no-GPU failure path does not apply")
		}
		_, err := lib.InitRank(1, a, 0)
		var ne *NCCLError
		if err == nil || !errors.As(err, &ne) || ne.Text == "" {
			t.Fatalf("communicator without a GPU: %v", err)
		}
		t.Logf("without a GPU: %v", err)
	}
}

func identifyDeviceErr(dev int) error {
	_, _, err := identifyDevice(dev)
	return err
}

func TestOpenKernelsMissingIsAnError(t *testing.T) {
	_, err := OpenKernels("/nonexistent/libzipccl_cuda.so")
	if err == nil || !strings.Contains(err.Error(), "cannot load the CUDA kernel library") {
		t.Fatalf("missing kernels: %v", err)
	}
	if _, err := OpenKernels("libc.so.6"); err == nil || !strings.Contains(err.Error(), "does not export zccl_") {
		t.Fatalf("libc as kernels: %v", err)
	}
}

func TestIdentifyWithoutDriver(t *testing.T) {
	if err := identifyDeviceErr(0); err != nil {
		t.Logf("no CUDA driver here: %v", err)
	}
}

// ---------------------------------------------------------------------------
// The unique-id exchange.

func TestExchangeIDThroughStore(t *testing.T) {
	store := rendezvous.NewMemStore()
	lib := &fakeLib{w: newFakeWorld(), version: 22000}
	deadline := time.Now().Add(5 * time.Second)
	ids := make([]UniqueID, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := 3; r >= 0; r-- { // the fetchers start first and wait
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ids[r], errs[r] = exchangeID(context.Background(), store, lib, "zipccl/gpu/g/nccl/coll", r, deadline)
		}(r)
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	for r := range ids {
		if errs[r] != nil || ids[r] != ids[0] || ids[0] == (UniqueID{}) {
			t.Fatalf("rank %d: id %x.. err %v", r, ids[r][:4], errs[r])
		}
	}
	// Nobody publishes: the fetch ends at the deadline with a clear error.
	_, err := exchangeID(context.Background(), store, lib, "zipccl/gpu/g/nccl/other", 1, time.Now().Add(50*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "waiting for the NCCL unique id") {
		t.Fatalf("no publisher: %v", err)
	}
	// A corrupt value.
	store.Set("zipccl/gpu/g/nccl/bad", []byte("short"))
	if _, err := exchangeID(context.Background(), store, lib, "zipccl/gpu/g/nccl/bad", 1, deadline); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("short id: %v", err)
	}
}

// ---------------------------------------------------------------------------
// Decisions.

func TestNCCLReductionMapping(t *testing.T) {
	for _, c := range []struct {
		dt     dtype.DType
		op     reduce.Op
		ver    int
		t      ncclDataType
		o      ncclRedOp
		premul bool
		staged string
	}{
		{dtype.Float32, reduce.Sum, 22000, ncclFloat32, ncclSum, false, ""},
		{dtype.BFloat16, reduce.Avg, 22000, ncclBfloat16, ncclAvg, false, ""},
		{dtype.BFloat16, reduce.Sum, 20900, 0, 0, false, "before 2.10"},
		{dtype.Float16, reduce.PreMulSum, 22000, ncclFloat16, 0, true, ""},
		{dtype.Float16, reduce.PreMulSum, 21000, 0, 0, false, "before 2.11"},
		{dtype.Int64, reduce.Max, 22000, ncclInt64, ncclMax, false, ""},
		{dtype.Int32, reduce.Avg, 22000, ncclInt32, ncclAvg, false, ""},
		{dtype.Int32, reduce.BXor, 22000, 0, 0, false, "NCCL has no BXOR"},
		{dtype.Int16, reduce.Sum, 22000, 0, 0, false, "cannot reduce int16"},
		{dtype.Float8E4M3FN, reduce.Sum, 22000, 0, 0, false, "cannot reduce"},
		{dtype.Bool, reduce.Sum, 22000, ncclUint8, ncclMax, false, ""},
		{dtype.Bool, reduce.BOr, 22000, ncclUint8, ncclMax, false, ""},
		{dtype.Bool, reduce.Product, 22000, ncclUint8, ncclMin, false, ""},
		{dtype.Bool, reduce.BAnd, 22000, ncclUint8, ncclMin, false, ""},
		{dtype.Bool, reduce.BXor, 22000, 0, 0, false, "NCCL has no BXOR"},
		{dtype.Float32, reduce.BAnd, 22000, 0, 0, false, "not supported"},
	} {
		dt, o, premul, why := ncclReduction(c.dt, c.op, c.ver)
		if c.staged != "" {
			if !strings.Contains(why, c.staged) {
				t.Errorf("%v %v: want %q, got %q", c.dt, c.op, c.staged, why)
			}
			continue
		}
		if why != "" || dt != c.t || premul != c.premul || (!premul && o != c.o) {
			t.Errorf("%v %v: got %v %v %v %q", c.dt, c.op, dt, o, premul, why)
		}
	}
}

func fullAgreement() agreement {
	return agreement{nccl: true, ncclVersion: 22000, kernels: true}
}

func TestDecide(t *testing.T) {
	ar := &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum}
	able := Caps{Kernels: true}
	noKernels := Caps{KernelsErr: "sees no CUDA device"}
	stager := Caps{Kernels: true, Forced: "staged"}
	int8Coding := lossy.Coding{Mode: quant.Int8, Block: 2048}
	lossyAG := &Op{Kind: opkind.AllGather, DType: dtype.BFloat16, Lossy: int8Coding, In: []Buf{{1, 64}}, Out: []Buf{{1, 64}, {2, 64}}}
	lossyRS := &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, Lossy: lossy.Coding{Mode: quant.Int4, Block: 256}}
	noNCCL := func(a *agreement) { a.nccl, a.ncclWhy = false, "NCCL is missing on rank 1 (x)" }
	cases := []struct {
		name   string
		op     *Op
		a      func(*agreement)
		mine   Caps
		mode   switcher.Mode
		path   Path
		reason string
	}{
		{"nccl", ar, nil, able, switcher.Auto, PathNCCL, ""},
		{"no nccl: coded", ar, noNCCL, able, switcher.Auto, PathCoded, "rank 1"},
		{"no nccl, no kernels here: staged", ar, noNCCL, noKernels, switcher.Auto, PathStaged, "no CUDA kernels (sees no CUDA device)"},
		{"no nccl, this rank stages", ar, noNCCL, stager, switcher.Auto, PathStaged, "this rank stages"},
		{"shared GPU: coded", ar, func(a *agreement) { a.shared = "ranks 0 and 1 share GPU g" }, able, switcher.Auto, PathCoded, "share GPU"},
		{"another rank forces staged", ar, func(a *agreement) { a.engine = "forced by rank 0 (ZIPCCL_GPU_PATH=staged)" }, able, switcher.Auto, PathCoded, "ZIPCCL_GPU_PATH=staged"},
		{"forced coded", ar, func(a *agreement) { a.engine = "forced by rank 1 (ZIPCCL_GPU_PATH=coded)" }, able, switcher.Never, PathCoded, "coded"},
		{"forced nccl", ar, func(a *agreement) {
			a.forceNCCL, a.ethernet = "ZIPCCL_GPU_PATH=nccl on rank 0", "the ranks span 2 hosts"
		}, able, switcher.Auto, PathNCCL, "ZIPCCL_GPU_PATH=nccl"},
		{"ethernet: coded", ar, func(a *agreement) { a.ethernet = "the ranks span 2 hosts and rank 1 has no RDMA NIC" }, able, switcher.Auto, PathCoded, "RDMA"},
		{"ethernet, compression off: nccl", ar, func(a *agreement) { a.ethernet = "the ranks span 2 hosts" }, able, switcher.Never, PathNCCL, ""},
		{"ethernet, a rank without kernels: nccl", ar, func(a *agreement) { a.ethernet, a.kernels = "the ranks span 2 hosts", false }, able, switcher.Auto, PathNCCL, ""},
		{"bitwise", &Op{Kind: opkind.AllReduce, DType: dtype.Int32, ReduceOp: reduce.BOr}, nil, able, switcher.Auto, PathCoded, "BOR"},
		{"int16 reduce", &Op{Kind: opkind.ReduceScatter, DType: dtype.Int16, ReduceOp: reduce.Sum}, nil, noKernels, switcher.Auto, PathStaged, "int16"},
		{"int16 gather", &Op{Kind: opkind.AllGather, DType: dtype.Int16}, nil, able, switcher.Auto, PathNCCL, ""},
		{"fp8 reduce", &Op{Kind: opkind.AllReduce, DType: dtype.Float8E5M2, ReduceOp: reduce.Sum}, nil, able, switcher.Auto, PathCoded, "float8"},
		{"fp8 alltoall", &Op{Kind: opkind.AllToAll, DType: dtype.Float8E5M2}, nil, able, switcher.Auto, PathNCCL, ""},
		{"always without kernels", ar, func(a *agreement) { a.kernels, a.kernelsWhy = false, "the CUDA kernel library is missing on rank 0" }, noKernels, switcher.Always, PathStaged, "mode always"},
		{"always without kernels, nvlink", ar, func(a *agreement) { a.kernels, a.nvlink = false, true }, noKernels, switcher.Always, PathNCCL, ""},
		{"auto without kernels", ar, func(a *agreement) { a.kernels = false }, noKernels, switcher.Auto, PathNCCL, ""},
		{"always without kernels, int", &Op{Kind: opkind.AllReduce, DType: dtype.Int32, ReduceOp: reduce.Sum}, func(a *agreement) { a.kernels = false }, noKernels, switcher.Always, PathNCCL, ""},
		{"always without kernels, avg (never coded on the GPU)", &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Avg}, func(a *agreement) { a.kernels = false }, noKernels, switcher.Always, PathNCCL, ""},
		{"send", &Op{Kind: opkind.Send, DType: dtype.Float32, Root: 1}, nil, able, switcher.Auto, PathNCCL, ""},
		{"lossy all_gather: nccl", lossyAG, nil, able, switcher.Auto, PathNCCL, "lossy policy codes it (int8), quantized on the GPU"},
		{"lossy, forced coded: staged", lossyAG, func(a *agreement) { a.engine = "forced by rank 1 (ZIPCCL_GPU_PATH=coded)" }, able, switcher.Auto, PathStaged, "coded on the host: forced by rank 1"},
		{"lossy, a rank without kernels: staged", lossyAG, func(a *agreement) { a.kernels, a.kernelsWhy = false, "the CUDA kernel library is missing on rank 1" }, able, switcher.Auto, PathStaged, "missing on rank 1"},
		{"lossy, shared GPU: staged", lossyAG, func(a *agreement) { a.shared = "ranks 0 and 1 share GPU g" }, able, switcher.Auto, PathStaged, "share GPU"},
		{"lossy, uneven shards: staged", &Op{Kind: opkind.AllGather, DType: dtype.BFloat16, Lossy: int8Coding, In: []Buf{{1, 64}}, Out: []Buf{{1, 64}, {2, 32}}}, nil, able, switcher.Auto, PathStaged, "differ in size"},
		{"lossy reduce_scatter: nccl", lossyRS, nil, able, switcher.Auto, PathNCCL, "quantized on the GPU"},
		{"lossy reduce_scatter over hosts of several ranks: nccl", lossyRS, func(a *agreement) { a.hosts = [][]int{{0, 1}, {2, 3}} }, able, switcher.Auto, PathNCCL, "quantized on the GPU"},
		{"lossy all_gather over hosts of several ranks: nccl", lossyAG, func(a *agreement) { a.hosts = [][]int{{0, 1}, {2, 3}} }, able, switcher.Auto, PathNCCL, "quantized on the GPU"},
	}
	for _, c := range cases {
		a := fullAgreement()
		if c.a != nil {
			c.a(&a)
		}
		p := decide(c.op, a, c.mine, c.mode)
		if p.Path != c.path || !strings.Contains(p.Reason, c.reason) || p.Refuse != "" {
			t.Errorf("%s: got %+v, want %v (%q)", c.name, p, c.path, c.reason)
		}
	}
	refused := []struct {
		name, want string
		a          func(*agreement)
		op         *Op
	}{
		{"recv from any source", "any source", nil, &Op{Kind: opkind.Recv, Root: -1, DType: dtype.Float32}},
		{"lossy, forced nccl", "but ZIPCCL_GPU_PATH=nccl on rank 0, and lossy coding cannot run on the GPU: ranks 0 and 1 share", func(a *agreement) {
			a.forceNCCL, a.shared = "ZIPCCL_GPU_PATH=nccl on rank 0", "ranks 0 and 1 share GPU g"
		}, &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, Lossy: lossy.Coding{Mode: quant.Int4, Block: 256}}},
		{"forced nccl on a shared GPU", "NCCL cannot run it: ranks 0 and 1 share", func(a *agreement) {
			a.forceNCCL, a.shared = "ZIPCCL_GPU_PATH=nccl on rank 0", "ranks 0 and 1 share GPU g"
		}, ar},
		{"forced nccl, reduction NCCL lacks", "NCCL cannot run it", func(a *agreement) { a.forceNCCL = "ZIPCCL_GPU_PATH=nccl on rank 0" },
			&Op{Kind: opkind.AllReduce, DType: dtype.Int32, ReduceOp: reduce.BXor}},
		{"disagreement", "disagree", func(a *agreement) {
			a.forceNCCL, a.engine = "ZIPCCL_GPU_PATH=nccl on rank 0", "forced by rank 1 (ZIPCCL_GPU_PATH=coded)"
		}, ar},
	}
	for _, c := range refused {
		a := fullAgreement()
		if c.a != nil {
			c.a(&a)
		}
		if p := decide(c.op, a, able, switcher.Auto); !strings.Contains(p.Refuse, c.want) {
			t.Errorf("%s: %+v, want a refusal saying %q", c.name, p, c.want)
		}
	}
}

func TestAgree(t *testing.T) {
	topo := nvlinkTopo(3)
	caps := func(i int) Caps {
		return Caps{Rank: i, NCCLVersion: 22803, Kernels: true, Peer: topology.Peer{Host: "h", UUID: testUUID(i)}}
	}
	all := []Caps{caps(0), caps(1), caps(2)}
	a := agree(all, topo, "h")
	if !a.nccl || !a.kernels || !a.nvlink || a.ncclVersion != 22803 || a.engine != "" || a.ethernet != "" {
		t.Fatalf("all capable on NVLink: %+v", a)
	}
	all[1].NCCLVersion, all[1].NCCLError = 0, "cannot load /x/libnccl.so.2"
	all[2].Kernels, all[2].KernelsErr = false, "sees no CUDA device"
	all[2].NCCLVersion = 21500
	all[0].Forced = "staged"
	all[2].Peer.Host = "other"
	all[2].RDMA = true
	a = agree(all, topo, "h")
	if a.nccl || !strings.Contains(a.ncclWhy, "rank 1 (cannot load /x/libnccl.so.2)") || a.ncclVersion != 21500 {
		t.Fatalf("nccl: %+v", a)
	}
	if a.kernels || !strings.Contains(a.kernelsWhy, "rank 2") || !strings.Contains(a.engine, "rank 0 (ZIPCCL_GPU_PATH=staged)") {
		t.Fatalf("kernels/staged: %+v", a)
	}
	if !strings.Contains(a.ethernet, "span 2 hosts and rank 0, rank 1 have no RDMA") {
		t.Fatalf("ethernet: %+v", a)
	}
	if a.nvlink || !strings.Contains(a.nvlinkWhy, "another host") {
		t.Fatalf("nvlink: %+v", a)
	}
	if a.hosts != nil { // hosts of 2 and 1 ranks
		t.Fatalf("hosts: %+v", a)
	}
	four := []Caps{caps(0), caps(1), caps(2), caps(3)}
	four[1].Peer.Host, four[3].Peer.Host = "other", "other"
	if a = agree(four, topo, "h"); fmt.Sprint(a.hosts) != "[[0 2] [1 3]]" {
		t.Fatalf("equal hosts: %+v", a)
	}
	if a = agree(four[1:], topo, "h"); a.hosts != nil {
		t.Fatalf("unequal hosts: %+v", a)
	}
}

// ---------------------------------------------------------------------------
// A fake world: N ranks in goroutines, fake NCCL, optionally the CPU
// emulation of the kernel library.

func testUUID(i int) string { return fmt.Sprintf("GPU-fake-%04d", i) }

// nvlinkTopo is one host with n GPUs, all NVLink-connected.
func nvlinkTopo(n int) topology.Topology {
	t := topology.Topology{}
	for i := 0; i < n; i++ {
		t.GPUs = append(t.GPUs, topology.GPU{Index: i, UUID: testUUID(i)})
		for j := i + 1; j < n; j++ {
			t.Links = append(t.Links, topology.Link{A: i, B: j, Kind: topology.KindNVLink})
		}
	}
	return t
}

func emuKernels(t *testing.T) *Kernels {
	t.Helper()
	path := os.Getenv("ZIPCCL_CUDA_EMU_LIB")
	if path == "" {
		path, _ = filepath.Abs("../../build/cuda_emu/libzipccl_cuda_emu.so")
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("the CPU emulation of the kernel library is not built (%s): run `make test-cuda-emu`", path)
	}
	k, err := OpenKernels(path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	k.serial = true
	// the emulation runs the kernels on one CPU core: time them on less
	restore := standInBytes
	standInBytes = 1 << 20
	t.Cleanup(func() { standInBytes = restore })
	return k
}

type worldOpts struct {
	n        int
	mode     switcher.Mode
	kernels  *Kernels
	nvlink   bool
	noNCCL   map[int]bool
	query    func(rank int) QueryFunc
	timeout  time.Duration
	onBroken func(rank int, err error)
	oneGPU   bool                  // every rank on the same GPU
	hostOf   func(rank int) string // each rank's host (nil: one host)
	flat     bool                  // Config.Flat
}

type world struct {
	t      *testing.T
	groups []*Group
	libs   []*fakeLib
	fw     *fakeWorld
	store  *rendezvous.MemStore
	o      worldOpts
}

func newWorld(t *testing.T, o worldOpts) *world {
	w := &world{t: t, fw: newFakeWorld(), store: rendezvous.NewMemStore(), o: o}
	if o.timeout == 0 {
		w.o.timeout = 20 * time.Second
	}
	topo := topology.Topology{}
	if o.nvlink {
		topo = nvlinkTopo(o.n)
	}
	for r := 0; r < o.n; r++ {
		r := r
		lib := &fakeLib{w: w.fw, global: r, version: 22803}
		env := &Env{
			openNCCL: func() (ncclLib, error) {
				if o.noNCCL[r] {
					return nil, errors.New("NCCL is not available: cannot load /nowhere/libnccl.so.2")
				}
				return lib, nil
			},
			openKern: func() (*Kernels, error) {
				if o.kernels == nil {
					return nil, errors.New("no kernel library in this test")
				}
				return o.kernels, nil
			},
			probeTopo: func() topology.Topology { return topo },
			host:      "testhost",
			identify: func(int) (string, string, error) {
				if o.oneGPU {
					return testUUID(0), "", nil
				}
				return testUUID(r), "", nil
			},
		}
		if o.hostOf != nil {
			env.host = o.hostOf(r)
		}
		if o.query != nil {
			q := o.query(r)
			env.query.Store(&q)
		}
		cfg := Config{Rank: r, Size: o.n, Name: "g", Store: w.store, Mode: o.mode, Env: env, Flat: o.flat}
		if o.onBroken != nil {
			cfg.OnBroken = func(err error) { o.onBroken(r, err) }
		}
		w.groups = append(w.groups, NewGroup(cfg))
		w.libs = append(w.libs, lib)
	}
	t.Cleanup(func() {
		for _, g := range w.groups {
			g.Close()
		}
	})
	return w
}

// each runs f on every rank's group at once and returns a channel closed
// when all have returned.
func (w *world) each(f func(r int, g *Group)) <-chan struct{} {
	var wg sync.WaitGroup
	for r, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(r, g)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	return finished
}

// run submits mk(rank)'s op on every rank at once and waits for every
// completion; errs[r] is the submit error or the completion's.
func (w *world) run(mk func(rank int) *Op) []error {
	w.t.Helper()
	errs := make([]error, len(w.groups))
	finished := w.each(func(r int, g *Group) {
		op := mk(r)
		if op.Timeout == 0 {
			op.Timeout = w.o.timeout
		}
		if op.Label == "" {
			op.Label = fmt.Sprintf("op%d", op.Kind)
		}
		done := make(chan error, 1)
		op.OnDone = func(err error) { done <- err }
		if err := g.Submit(op); err != nil {
			errs[r] = err
			return
		}
		errs[r] = <-done
	})
	select {
	case <-finished:
	case <-time.After(2 * w.o.timeout):
		w.t.Fatal("ops did not complete (hang)")
	}
	return errs
}

// planAll plans mk()'s op on every rank at once (the agreement needs them
// all) and fails the test on any error.
func (w *world) planAll(mk func() *Op) []Plan {
	w.t.Helper()
	plans := make([]Plan, len(w.groups))
	errs := make([]error, len(w.groups))
	<-w.each(func(r int, g *Group) { plans[r], errs[r] = g.Plan(mk()) })
	noErrors(w.t, "plan", errs)
	return plans
}

func noErrors(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

func f32s(vals []float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func getF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// Every op kind through the fake NCCL, uncoded, against host arithmetic on
// integer-valued floats (exact in any order).
func TestUncodedOpsThroughFakeNCCL(t *testing.T) {
	const n = 3
	w := newWorld(t, worldOpts{n: n, mode: switcher.Auto})
	const count = 1000
	val := func(r, i int) float32 { return float32((r+1)*1000 + i%97) }
	input := func(r int) []byte {
		v := make([]float32, count)
		for i := range v {
			v[i] = val(r, i)
		}
		return f32s(v)
	}
	b := func(buf []byte) Buf { return Buf{Ptr: addr(buf), Bytes: len(buf)} }
	chunks := func(buf []byte, parts int) []Buf {
		out := make([]Buf, parts)
		step := len(buf) / parts
		for i := range out {
			out[i] = Buf{Ptr: addr(buf) + uintptr(i*step), Bytes: step}
		}
		return out
	}
	keep := make([][]byte, 0, 64) // every buffer stays alive
	hold := func(x []byte) []byte { keep = append(keep, x); return x }

	t.Run("all_reduce", func(t *testing.T) {
		for _, op := range []reduce.Op{reduce.Sum, reduce.Avg, reduce.Max, reduce.PreMulSum} {
			bufs := make([][]byte, n)
			for r := range bufs {
				bufs[r] = hold(input(r))
			}
			noErrors(t, op.String(), w.run(func(r int) *Op {
				return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: op, PreMul: 0.5, In: []Buf{b(bufs[r])}, Out: []Buf{b(bufs[r])}}
			}))
			for r := range bufs {
				got := getF32(bufs[r])
				for i := range got {
					var want float64
					for j := 0; j < n; j++ {
						v := float64(val(j, i))
						switch op {
						case reduce.Max:
							want = math.Max(want, v)
						case reduce.PreMulSum:
							want += 0.5 * v
						default:
							want += v
						}
					}
					if op == reduce.Avg {
						want /= n
					}
					if float64(got[i]) != float64(float32(want)) {
						t.Fatalf("%v rank %d [%d] = %v, want %v", op, r, i, got[i], want)
					}
				}
			}
		}
	})
	t.Run("broadcast_reduce", func(t *testing.T) {
		bufs := make([][]byte, n)
		outs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = hold(input(r))
			outs[r] = hold(make([]byte, 4*count))
		}
		noErrors(t, "broadcast", w.run(func(r int) *Op {
			return &Op{Kind: opkind.Broadcast, DType: dtype.Float32, Root: 2, In: []Buf{b(bufs[r])}, Out: []Buf{b(bufs[r])}}
		}))
		for r := range bufs {
			if string(bufs[r]) != string(input(2)) {
				t.Fatalf("broadcast: rank %d differs", r)
			}
		}
		for r := range bufs {
			bufs[r] = hold(input(r))
		}
		noErrors(t, "reduce", w.run(func(r int) *Op {
			return &Op{Kind: opkind.Reduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Root: 1, In: []Buf{b(bufs[r])}, Out: []Buf{b(outs[r])}}
		}))
		got := getF32(outs[1])
		for i := range got {
			if got[i] != val(0, i)+val(1, i)+val(2, i) {
				t.Fatalf("reduce [%d] = %v", i, got[i])
			}
		}
	})
	t.Run("all_gather", func(t *testing.T) {
		for _, separate := range []bool{false, true} {
			ins := make([][]byte, n)
			outs := make([][][]byte, n)
			flat := make([][]byte, n)
			for r := range ins {
				ins[r] = hold(input(r))
				flat[r] = hold(make([]byte, n*4*count))
				for j := 0; j < n; j++ {
					outs[r] = append(outs[r], hold(make([]byte, 4*count)))
				}
			}
			noErrors(t, "all_gather", w.run(func(r int) *Op {
				op := &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: []Buf{b(ins[r])}}
				if separate {
					for j := 0; j < n; j++ {
						op.Out = append(op.Out, b(outs[r][j]))
					}
				} else {
					op.Out = chunks(flat[r], n)
				}
				return op
			}))
			for r := 0; r < n; r++ {
				for j := 0; j < n; j++ {
					got := flat[r][j*4*count : (j+1)*4*count]
					if separate {
						got = outs[r][j]
					}
					if string(got) != string(input(j)) {
						t.Fatalf("all_gather (separate %v): rank %d slot %d", separate, r, j)
					}
				}
			}
		}
	})
	t.Run("reduce_scatter", func(t *testing.T) {
		for _, separate := range []bool{false, true} {
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			for r := range ins {
				v := make([]float32, n*count)
				for i := range v {
					v[i] = val(r, i)
				}
				ins[r] = hold(f32s(v))
				outs[r] = hold(make([]byte, 4*count))
			}
			var sep [][][]byte
			for r := 0; r < n; r++ {
				var parts [][]byte
				for j := 0; j < n; j++ {
					parts = append(parts, hold(append([]byte(nil), ins[r][j*4*count:(j+1)*4*count]...)))
				}
				sep = append(sep, parts)
			}
			noErrors(t, "reduce_scatter", w.run(func(r int) *Op {
				op := &Op{Kind: opkind.ReduceScatter, DType: dtype.Float32, ReduceOp: reduce.Sum, Out: []Buf{b(outs[r])}}
				if separate {
					for j := 0; j < n; j++ {
						op.In = append(op.In, b(sep[r][j]))
					}
				} else {
					op.In = chunks(ins[r], n)
				}
				return op
			}))
			for r := 0; r < n; r++ {
				got := getF32(outs[r])
				for i := range got {
					var want float32
					for j := 0; j < n; j++ {
						want += val(j, r*count+i)
					}
					if got[i] != want {
						t.Fatalf("reduce_scatter (separate %v): rank %d [%d] = %v, want %v", separate, r, i, got[i], want)
					}
				}
			}
		}
	})
	t.Run("all_to_all_gather_scatter", func(t *testing.T) {
		ins := make([][]byte, n)
		outs := make([][]byte, n)
		// uneven: rank r sends (j+1)*(r+1) floats to rank j
		for r := 0; r < n; r++ {
			var v []float32
			for j := 0; j < n; j++ {
				for i := 0; i < (j+1)*(r+1); i++ {
					v = append(v, float32(100*r+10*j+i))
				}
			}
			ins[r] = hold(f32s(v))
			size := 0
			for j := 0; j < n; j++ {
				size += 4 * (r + 1) * (j + 1)
			}
			outs[r] = hold(make([]byte, size))
		}
		noErrors(t, "all_to_all", w.run(func(r int) *Op {
			op := &Op{Kind: opkind.AllToAll, DType: dtype.Float32}
			in, out := addr(ins[r]), addr(outs[r])
			for j := 0; j < n; j++ {
				op.In = append(op.In, Buf{Ptr: in, Bytes: 4 * (j + 1) * (r + 1)})
				in += uintptr(4 * (j + 1) * (r + 1))
				op.Out = append(op.Out, Buf{Ptr: out, Bytes: 4 * (r + 1) * (j + 1)})
				out += uintptr(4 * (r + 1) * (j + 1))
			}
			return op
		}))
		for r := 0; r < n; r++ {
			got := getF32(outs[r])
			k := 0
			for j := 0; j < n; j++ {
				for i := 0; i < (r+1)*(j+1); i++ {
					if want := float32(100*j + 10*r + i); got[k] != want {
						t.Fatalf("all_to_all: rank %d from %d [%d] = %v, want %v", r, j, i, got[k], want)
					}
					k++
				}
			}
		}
		// gather to root 1, then scatter back from it
		gin := make([][]byte, n)
		gout := make([][]byte, n)
		for r := range gin {
			gin[r] = hold(input(r))
			gout[r] = hold(make([]byte, n*4*count))
		}
		noErrors(t, "gather", w.run(func(r int) *Op {
			op := &Op{Kind: opkind.Gather, DType: dtype.Float32, Root: 1, In: []Buf{b(gin[r])}}
			if r == 1 {
				op.Out = chunks(gout[r], n)
			}
			return op
		}))
		for j := 0; j < n; j++ {
			if string(gout[1][j*4*count:(j+1)*4*count]) != string(input(j)) {
				t.Fatalf("gather slot %d", j)
			}
		}
		sout := make([][]byte, n)
		for r := range sout {
			sout[r] = hold(make([]byte, 4*count))
		}
		noErrors(t, "scatter", w.run(func(r int) *Op {
			op := &Op{Kind: opkind.Scatter, DType: dtype.Float32, Root: 1, Out: []Buf{b(sout[r])}}
			if r == 1 {
				op.In = chunks(gout[r], n)
			}
			return op
		}))
		for r := 0; r < n; r++ {
			if string(sout[r]) != string(input(r)) {
				t.Fatalf("scatter: rank %d", r)
			}
		}
	})
	t.Run("send_recv_pairs", func(t *testing.T) {
		// ring: every rank sends to the right and receives from the
		// left, deferred and flushed as one NCCL group (coalescing), the
		// pattern that deadlocks without grouping.
		sbuf := make([][]byte, n)
		rbuf := make([][]byte, n)
		for r := range sbuf {
			sbuf[r] = hold(input(r))
			rbuf[r] = hold(make([]byte, 4*count))
		}
		errs := make([]error, n)
		<-w.each(func(r int, g *Group) {
			done := make(chan error, 2)
			right, left := (r+1)%n, (r+n-1)%n
			send := &Op{Kind: opkind.Send, DType: dtype.Float32, Root: right, In: []Buf{b(sbuf[r])}, Defer: true, Timeout: 10 * time.Second, Label: "send", OnDone: func(e error) { done <- e }}
			recv := &Op{Kind: opkind.Recv, DType: dtype.Float32, Root: left, Out: []Buf{b(rbuf[r])}, Defer: true, Timeout: 10 * time.Second, Label: "recv", OnDone: func(e error) { done <- e }}
			if err := errors.Join(g.Submit(send), g.Submit(recv), g.Flush()); err != nil {
				errs[r] = err
				return
			}
			errs[r] = errors.Join(<-done, <-done)
		})
		noErrors(t, "ring", errs)
		for r := 0; r < n; r++ {
			if string(rbuf[r]) != string(input((r+n-1)%n)) {
				t.Fatalf("rank %d received the wrong data", r)
			}
			if w.libs[r].groups == 0 {
				t.Fatalf("rank %d: the coalesced ops were not one NCCL group", r)
			}
		}
		// The pair communicators were created through the store.
		for _, k := range []string{"zipccl/gpu/g/nccl/p2p/0-1", "zipccl/gpu/g/nccl/p2p/1-2", "zipccl/gpu/g/nccl/p2p/0-2", "zipccl/gpu/g/nccl/coll"} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if _, err := w.store.Get(ctx, k); err != nil {
				t.Errorf("store key %s: %v", k, err)
			}
			cancel()
		}
	})
	for r, g := range w.groups {
		if g.coll == nil || !g.coll.nccl || g.coll.kernels {
			t.Fatalf("rank %d agreement %+v", r, g.coll)
		}
	}
}

func TestPlanStagedWhenARankLacksNCCL(t *testing.T) {
	w := newWorld(t, worldOpts{n: 3, mode: switcher.Auto, noNCCL: map[int]bool{2: true}})
	plans := w.planAll(func() *Op {
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Timeout: 5 * time.Second, Label: "all_reduce"}
	})
	for r, p := range plans {
		if p.Path != PathStaged || !strings.Contains(p.Reason, "rank 2") || !strings.Contains(p.Reason, "/nowhere/libnccl.so.2") {
			t.Fatalf("rank %d: %+v", r, p)
		}
	}
	// Submitting a staged op as a device op is refused, not run.
	err := w.groups[0].Submit(&Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Timeout: time.Second, Label: "all_reduce", In: []Buf{{}}, Out: []Buf{{}}})
	if err == nil || !strings.Contains(err.Error(), "staged") {
		t.Fatalf("submit of a staged op: %v", err)
	}
	// Point-to-point between two capable ranks goes through NCCL.
	var p01 [2]Plan
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			p01[r], errs[r] = w.groups[r].Plan(&Op{Kind: opkind.Send, DType: dtype.Float32, Root: 1 - r, Timeout: 5 * time.Second, Label: "send"})
		}(r)
	}
	wg.Wait()
	noErrors(t, "plan 0<->1", errs)
	if p01[0].Path != PathNCCL || p01[1].Path != PathNCCL {
		t.Fatalf("0<->1: %+v", p01)
	}
}

// Ranks sharing a GPU cannot form an NCCL communicator ("Duplicate GPU
// detected"): they stage, and say why.
func TestRanksSharingAGPUStage(t *testing.T) {
	w := newWorld(t, worldOpts{n: 2, mode: switcher.Auto, oneGPU: true})
	plans := w.planAll(func() *Op {
		return &Op{Kind: opkind.AllGather, DType: dtype.Float32, Timeout: 5 * time.Second, Label: "all_gather"}
	})
	for r, p := range plans {
		if p.Path != PathStaged || !strings.Contains(p.Reason, "ranks 0 and 1 share GPU "+testUUID(0)) {
			t.Fatalf("rank %d: %+v", r, p)
		}
	}
}

// A communicator that failed to come up makes the group unusable on the
// ranks that saw it fail, at once, instead of a retry under the same store
// key (which paired unique ids of different tries and hung until the
// timeout).
func TestFailedCommInitIsFinal(t *testing.T) {
	w := newWorld(t, worldOpts{n: 2, mode: switcher.Never, timeout: 500 * time.Millisecond})
	w.fw.initErr[0] = errors.New("invalid usage: Duplicate GPU detected")
	w.fw.initErr[1] = errors.New("invalid usage: Duplicate GPU detected")
	bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	op := func(label string) func(r int) *Op {
		return func(r int) *Op {
			b := Buf{Ptr: addr(bufs[r]), Bytes: 64}
			return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}, Label: label}
		}
	}
	for r, err := range w.run(op("first")) {
		if err == nil || !strings.Contains(err.Error(), "creating the NCCL communicator") || !strings.Contains(err.Error(), "Duplicate GPU") {
			t.Fatalf("rank %d, first op: %v", r, err)
		}
	}
	start := time.Now()
	for r, err := range w.run(op("second")) {
		if err == nil || !strings.Contains(err.Error(), "unusable after an earlier failure") || !strings.Contains(err.Error(), "Duplicate GPU") {
			t.Fatalf("rank %d, second op: %v", r, err)
		}
	}
	if d := time.Since(start); d > 400*time.Millisecond {
		t.Fatalf("the second op took %v to fail", d)
	}
}

func TestCUDATensorsOfAnotherDevice(t *testing.T) {
	w := newWorld(t, worldOpts{n: 1, mode: switcher.Auto})
	g := w.groups[0]
	if _, err := g.Plan(&Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Device: 0, Timeout: time.Second, Label: "all_reduce"}); err != nil {
		t.Fatal(err)
	}
	_, err := g.Plan(&Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Device: 1, Timeout: time.Second, Label: "all_reduce"})
	if err == nil || !strings.Contains(err.Error(), "runs on cuda:0") {
		t.Fatalf("second device: %v", err)
	}
}

// A device op whose end event never completes times out: the op fails with
// a timeout naming it, the communicators are aborted, the group is broken.
func TestDeviceTimeoutAbortsNCCL(t *testing.T) {
	broken := make(chan error, 4)
	w := newWorld(t, worldOpts{n: 2, mode: switcher.Auto, timeout: 300 * time.Millisecond,
		query:    func(int) QueryFunc { return func(uintptr) (bool, error) { return false, nil } },
		onBroken: func(r int, err error) { broken <- err },
	})
	bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	start := time.Now()
	errs := w.run(func(r int) *Op {
		b := Buf{Ptr: addr(bufs[r]), Bytes: 64}
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}, Label: "all_reduce(float32, 16 elements, SUM)"}
	})
	for r, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeTimeout || !strings.Contains(err.Error(), "timed out") || !strings.Contains(err.Error(), "all_reduce(float32, 16 elements, SUM)") || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	for r := 0; r < 2; r++ {
		select {
		case <-broken:
		case <-time.After(time.Second):
			t.Fatalf("OnBroken not called on every rank")
		}
		if c := w.groups[r].comm.(*fakeComm); c.abortCount() == 0 {
			t.Fatalf("rank %d: NCCL communicator not aborted", r)
		}
	}
	// Later ops are refused at once.
	err := w.groups[0].Submit(&Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, Timeout: time.Second, Label: "next", In: []Buf{{}}, Out: []Buf{{}}})
	if err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Fatalf("after the timeout: %v", err)
	}
}

// An asynchronous NCCL error fails the ops in flight and breaks the group.
func TestAsyncErrorBreaksGroup(t *testing.T) {
	var release sync.WaitGroup
	release.Add(1)
	w := newWorld(t, worldOpts{n: 1, mode: switcher.Auto, timeout: 10 * time.Second,
		query: func(int) QueryFunc { return func(uintptr) (bool, error) { return false, nil } },
	})
	g := w.groups[0]
	buf := make([]byte, 16)
	done := make(chan error, 1)
	b := Buf{Ptr: addr(buf), Bytes: 16}
	op := &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}, Timeout: 10 * time.Second, Label: "all_reduce", OnDone: func(e error) { done <- e }}
	if err := g.Submit(op); err != nil {
		t.Fatal(err)
	}
	g.comm.(*fakeComm).setAsyncError(&NCCLError{Call: "NCCL (asynchronous error)", Result: 6, Text: "remote process exited or there was a network error"})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "asynchronous error") || !strings.Contains(err.Error(), "network error") {
			t.Fatalf("async error: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("async error not noticed")
	}
}

// Completion waits for the end event: an op completes only once its query
// says so, in stream order.
func TestCompletionFollowsEvents(t *testing.T) {
	var mu sync.Mutex
	ready := map[uintptr]bool{}
	w := newWorld(t, worldOpts{n: 1, mode: switcher.Auto,
		query: func(int) QueryFunc {
			return func(h uintptr) (bool, error) { mu.Lock(); defer mu.Unlock(); return ready[h], nil }
		},
	})
	g := w.groups[0]
	buf := make([]byte, 16)
	b := Buf{Ptr: addr(buf), Bytes: 16}
	done := make(chan int, 2)
	for i := 1; i <= 2; i++ {
		i := i
		op := &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}, Done: uintptr(i), Stream: 7, Timeout: 10 * time.Second, Label: "all_reduce", OnDone: func(e error) {
			if e != nil {
				t.Errorf("op %d: %v", i, e)
			}
			done <- i
		}}
		if err := g.Submit(op); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case i := <-done:
		t.Fatalf("op %d completed before its event", i)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	ready[2] = true // the second's event alone: still nothing (stream order)
	mu.Unlock()
	select {
	case i := <-done:
		t.Fatalf("op %d completed out of stream order", i)
	case <-time.After(50 * time.Millisecond):
	}
	mu.Lock()
	ready[1] = true
	mu.Unlock()
	if a, b := <-done, <-done; a != 1 || b != 2 {
		t.Fatalf("completion order %d %d", a, b)
	}
}

// ---------------------------------------------------------------------------
// The coded path on the CPU emulation of the kernels, bit for bit.

// refFold is the coded path's reduction: float32 accumulation in rank
// order, one rounding to dt.
func refFold(dt dtype.DType, parts [][]byte) []byte {
	es := dt.Size()
	out := make([]byte, len(parts[0]))
	for i := 0; i < len(out)/es; i++ {
		var acc float32
		for r, p := range parts {
			v := widen(dt, p[i*es:])
			if r == 0 {
				acc = v
			} else {
				acc += v
			}
		}
		narrow(dt, out[i*es:], acc)
	}
	return out
}

func widen(dt dtype.DType, b []byte) float32 {
	switch dt {
	case dtype.BFloat16:
		return dtype.BF16ToF32(binary.LittleEndian.Uint16(b))
	case dtype.Float16:
		return dtype.F16ToF32(binary.LittleEndian.Uint16(b))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b))
}

func narrow(dt dtype.DType, b []byte, v float32) {
	switch dt {
	case dtype.BFloat16:
		binary.LittleEndian.PutUint16(b, dtype.F32ToBF16(v))
	case dtype.Float16:
		binary.LittleEndian.PutUint16(b, dtype.F32ToF16(v))
	case dtype.Float8E4M3FN:
		b[0] = dtype.F32ToE4M3FN(v)
	case dtype.Float8E5M2:
		b[0] = dtype.F32ToE5M2(v)
	default:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	}
}

// gradients is Gaussian-ish data of dt (what the codec compresses).
func gradients(dt dtype.DType, n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		narrow(dt, out[i*dt.Size():], float32(rng.NormFloat64()*0.02))
	}
	return out
}

func TestCodedOpsOnEmulatedKernels(t *testing.T) {
	if testing.Short() {
		t.Skip("the emulated kernels are slow")
	}
	k := emuKernels(t)
	const n = 3
	w := newWorld(t, worldOpts{n: n, mode: switcher.Always, kernels: k, timeout: 60 * time.Second})
	thr := switcher.DefaultThresholds
	thr.TwoShotMin = 1024 // reductions are coded from this size on
	for _, g := range w.groups {
		g.cfg.Thresholds = thr
	}
	keep := [][]byte{}
	hold := func(x []byte) []byte { keep = append(keep, x); return x }
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
		es := dt.Size()
		count := 20011 // two zip3 blocks and a tail, not a multiple of n
		t.Run(dt.String()+"/all_reduce", func(t *testing.T) {
			ins := make([][]byte, n)
			bufs := make([][]byte, n)
			for r := range ins {
				ins[r] = gradients(dt, count, uint64(r+1))
				bufs[r] = hold(append([]byte(nil), ins[r]...))
			}
			var ops [n]*Op
			noErrors(t, "all_reduce", w.run(func(r int) *Op {
				b := Buf{Ptr: addr(bufs[r]), Bytes: len(bufs[r])}
				ops[r] = &Op{Kind: opkind.AllReduce, DType: dt, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}}
				return ops[r]
			}))
			// reference: the rank-order fold per chunk of the even split
			want := make([]byte, 0, len(ins[0]))
			off := 0
			for _, c := range splitEven(int64(count), n) {
				parts := make([][]byte, n)
				for r := range parts {
					parts[r] = ins[r][off*es : (off+int(c))*es]
				}
				want = append(want, refFold(dt, parts)...)
				off += int(c)
			}
			for r := 0; r < n; r++ {
				if !ops[r].Decision.Coded {
					t.Fatalf("rank %d: not coded: %+v", r, ops[r].Decision)
				}
				if string(bufs[r]) != string(want) {
					t.Fatalf("rank %d: all_reduce differs from the rank-order fold", r)
				}
				if ops[r].Wire <= 0 || ops[r].Wire >= int64(2*len(want)) {
					t.Fatalf("rank %d: wire bytes %d for a %d-byte payload", r, ops[r].Wire, len(want))
				}
			}
		})
		t.Run(dt.String()+"/reduce_scatter", func(t *testing.T) {
			per := 7001
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			for r := range ins {
				ins[r] = hold(gradients(dt, n*per, uint64(10+r)))
				outs[r] = hold(make([]byte, per*es))
			}
			noErrors(t, "reduce_scatter", w.run(func(r int) *Op {
				op := &Op{Kind: opkind.ReduceScatter, DType: dt, ReduceOp: reduce.Sum, Out: []Buf{{Ptr: addr(outs[r]), Bytes: per * es}}}
				for j := 0; j < n; j++ {
					op.In = append(op.In, Buf{Ptr: addr(ins[r]) + uintptr(j*per*es), Bytes: per * es})
				}
				return op
			}))
			for r := 0; r < n; r++ {
				parts := make([][]byte, n)
				for j := range parts {
					parts[j] = ins[j][r*per*es : (r+1)*per*es]
				}
				if string(outs[r]) != string(refFold(dt, parts)) {
					t.Fatalf("rank %d: reduce_scatter differs", r)
				}
			}
		})
		t.Run(dt.String()+"/all_gather_all_to_all_broadcast", func(t *testing.T) {
			per := 9000
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			for r := range ins {
				ins[r] = hold(gradients(dt, per, uint64(20+r)))
				outs[r] = hold(make([]byte, n*per*es))
			}
			noErrors(t, "all_gather", w.run(func(r int) *Op {
				op := &Op{Kind: opkind.AllGather, DType: dt, In: []Buf{{Ptr: addr(ins[r]), Bytes: per * es}}}
				for j := 0; j < n; j++ {
					op.Out = append(op.Out, Buf{Ptr: addr(outs[r]) + uintptr(j*per*es), Bytes: per * es})
				}
				return op
			}))
			for r := 0; r < n; r++ {
				for j := 0; j < n; j++ {
					if string(outs[r][j*per*es:(j+1)*per*es]) != string(ins[j]) {
						t.Fatalf("all_gather: rank %d slot %d", r, j)
					}
				}
			}
			// all-to-all, uneven: rank r sends 3000*(j+1)+r elements to j
			unevenAllToAll(t, w, dt, func(r, j int) int { return 3000*(j+1) + r }, 30, hold)
			bc := make([][]byte, n)
			for r := range bc {
				bc[r] = hold(gradients(dt, per, uint64(40+r)))
			}
			src := append([]byte(nil), bc[1]...)
			var ops [n]*Op
			noErrors(t, "broadcast", w.run(func(r int) *Op {
				b := Buf{Ptr: addr(bc[r]), Bytes: len(bc[r])}
				ops[r] = &Op{Kind: opkind.Broadcast, DType: dt, Root: 1, In: []Buf{b}, Out: []Buf{b}}
				return ops[r]
			}))
			for r := 0; r < n; r++ {
				if string(bc[r]) != string(src) || !ops[r].Decision.Coded {
					t.Fatalf("broadcast: rank %d (coded %v)", r, ops[r].Decision.Coded)
				}
			}
		})
	}
}

// Over NVLink nothing is coded, even in mode always; the same op then goes
// through NCCL uncoded.
func TestNeverCodedOverNVLink(t *testing.T) {
	k := emuKernels(t)
	w := newWorld(t, worldOpts{n: 2, mode: switcher.Always, kernels: k, nvlink: true})
	bufs := [][]byte{gradients(dtype.BFloat16, 1<<20, 1), gradients(dtype.BFloat16, 1<<20, 2)}
	var ops [2]*Op
	noErrors(t, "all_reduce", w.run(func(r int) *Op {
		b := Buf{Ptr: addr(bufs[r]), Bytes: len(bufs[r])}
		ops[r] = &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}}
		return ops[r]
	}))
	for r, op := range ops {
		if op.Decision.Coded {
			t.Fatalf("rank %d coded over NVLink", r)
		}
		if g := w.groups[r]; !g.coll.nvlink || !g.profile.NoCompress {
			t.Fatalf("rank %d: agreement %+v, profile %+v", r, g.coll, g.profile)
		}
	}
	if string(bufs[0]) != string(bufs[1]) {
		t.Fatal("ranks disagree")
	}
}

// Auto mode measures the links once (on every rank at the same op) before
// deciding; the measured profile is the same on every rank.
func TestAutoProbesOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("the emulated kernels are slow")
	}
	k := emuKernels(t)
	w := newWorld(t, worldOpts{n: 2, mode: switcher.Auto, kernels: k, timeout: 60 * time.Second})
	thr := switcher.DefaultThresholds
	thr.CompressMin, thr.TwoShotMin = 16<<10, 16<<10
	for _, g := range w.groups {
		g.cfg.Thresholds = thr
	}
	bufs := [][]byte{gradients(dtype.BFloat16, 20000, 1), gradients(dtype.BFloat16, 20000, 2)}
	noErrors(t, "all_reduce", w.run(func(r int) *Op {
		b := Buf{Ptr: addr(bufs[r]), Bytes: len(bufs[r])}
		return &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: []Buf{b}, Out: []Buf{b}}
	}))
	p0, p1 := w.groups[0].profile, w.groups[1].profile
	if !p0.Measured || p0 != p1 {
		t.Fatalf("profiles differ or unmeasured: %+v vs %+v", p0, p1)
	}
	if string(bufs[0]) != string(bufs[1]) {
		t.Fatal("ranks disagree")
	}
}

// An all_to_all whose payload differs between ranks (here rank 0 sends
// nothing, as MoE routing can make it) must take the same decision on every
// rank: the ranks would otherwise run different protocols over NCCL. Run
// under always (a rank with no payload would not code) and auto (sizes on
// both sides of the compression size), on the emulated kernels.
func TestUnevenAllToAllDecidesAlike(t *testing.T) {
	k := emuKernels(t)
	const n = 3
	for _, mode := range []switcher.Mode{switcher.Always, switcher.Auto} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newWorld(t, worldOpts{n: n, mode: mode, kernels: k, timeout: 30 * time.Second})
			dt := dtype.BFloat16
			// rank r sends cnt(r, j) elements to rank j: nothing from rank
			// 0, about 1.5 MiB in all from each of the others
			cnt := func(r, j int) int {
				if r == 0 {
					return 0
				}
				return 250000 + 1000*j + r
			}
			keep := [][]byte{}
			ops := unevenAllToAll(t, w, dt, cnt, 50, func(x []byte) []byte { keep = append(keep, x); return x })
			for r := range ops {
				if ops[r].Decision.Coded != ops[0].Decision.Coded {
					t.Fatalf("rank %d coded %v, rank 0 %v", r, ops[r].Decision.Coded, ops[0].Decision.Coded)
				}
			}
			if mode == switcher.Always && !ops[0].Decision.Coded {
				t.Fatalf("always: not coded: %+v", ops[0].Decision)
			}
			if mode == switcher.Auto {
				// rank 0, with nothing to send, timed the kernels on
				// stand-in data: an empty input used to fail the probe and
				// leave the group uncoded for good
				for r, g := range w.groups {
					if p := g.profile; !p.Measured || !(p.Enc[codec.Zip3] > 0) || !(p.Dec[codec.Zip3] > 0) {
						t.Fatalf("rank %d: profile %+v", r, p)
					}
				}
			}
			runtime.KeepAlive(keep)
		})
	}
}

// unevenAllToAll runs an all_to_all on w in which rank r sends cnt(r, j)
// elements of dt to rank j (inputs generated from seed+r, buffers passed to
// hold so they outlive the op), checks every block bit for bit, and returns
// the ops.
func unevenAllToAll(t *testing.T, w *world, dt dtype.DType, cnt func(r, j int) int, seed uint64, hold func([]byte) []byte) []*Op {
	t.Helper()
	n, es := len(w.groups), dt.Size()
	ins, outs := make([][]byte, n), make([][]byte, n)
	for r := 0; r < n; r++ {
		tot, totOut := 0, 0
		for j := 0; j < n; j++ {
			tot += cnt(r, j)
			totOut += cnt(j, r)
		}
		ins[r] = hold(gradients(dt, max(tot, 1), seed+uint64(r)))
		outs[r] = hold(make([]byte, totOut*es))
	}
	ops := make([]*Op, n)
	noErrors(t, "all_to_all", w.run(func(r int) *Op {
		op := &Op{Kind: opkind.AllToAll, DType: dt}
		in, out := addr(ins[r]), addr(outs[r])
		for j := 0; j < n; j++ {
			op.In = append(op.In, Buf{Ptr: in, Bytes: cnt(r, j) * es})
			in += uintptr(cnt(r, j) * es)
			op.Out = append(op.Out, Buf{Ptr: out, Bytes: cnt(j, r) * es})
			out += uintptr(cnt(j, r) * es)
		}
		ops[r] = op
		return op
	}))
	for r := 0; r < n; r++ {
		got := outs[r]
		for j := 0; j < n; j++ {
			start := 0
			for x := 0; x < r; x++ {
				start += cnt(j, x)
			}
			want := ins[j][start*es : (start+cnt(j, r))*es]
			if string(got[:len(want)]) != string(want) {
				t.Fatalf("all_to_all: rank %d from %d", r, j)
			}
			got = got[len(want):]
		}
	}
	return ops
}
