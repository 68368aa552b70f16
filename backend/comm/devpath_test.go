package comm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
)

// The coded path's engine logic on the CPU emulation of the kernel
// library: "device memory" comes from the emulation's allocator, which
// keeps it unreadable by the host outside the library's calls
// (ZCCL_EMU_PROTECT=1), so any host access to a CUDA buffer by comm or
// zcoll faults here as it would on a GPU.

var (
	emuOnce sync.Once
	emuK    *gpu.Kernels
	emuErr  error
)

func emuKernels(t *testing.T) *gpu.Kernels {
	t.Helper()
	emuOnce.Do(func() {
		path := os.Getenv("ZIPCCL_CUDA_EMU_LIB")
		if path == "" {
			path, _ = filepath.Abs("../../build/cuda_emu/libzipccl_cuda_emu.so")
		}
		if _, err := os.Stat(path); err != nil {
			emuErr = fmt.Errorf("the CPU emulation of the kernel library is not built (%s): run `make test-cuda-emu`", path)
			return
		}
		os.Setenv("ZCCL_EMU_PROTECT", "1")
		if emuK, emuErr = gpu.OpenKernels(path); emuErr == nil {
			emuK.Serialize()
		}
	})
	if emuErr != nil {
		if strings.Contains(emuErr.Error(), "not built") {
			t.Skip(emuErr)
		}
		t.Fatal(emuErr)
	}
	return emuK
}

// devRig is a group whose ranks have the emulated GPU.
func newDevRig(t *testing.T, n int, opts map[string]string) *rig {
	t.Helper()
	k := emuKernels(t)
	return newRigConfig(t, n, func(int) Config {
		env := gpu.NewEnv(gpu.EnvConfig{Kernels: k, Host: "testhost", UUID: "GPU-emu-0"})
		return Config{Name: "dev", Timeout: 60 * time.Second, Options: opts, GPU: env}
	})
}

// A tensorOp is an op over a rank's tensors: its buffers are stretches of
// them (so aliasing, like an in-place all_reduce, is expressed).
type tensorOp struct {
	kind    opkind.Kind
	dt      dtype.DType
	redop   reduce.Op
	root    int
	premul  float64
	tensors [][]byte // initial contents
	in, out []ref
}

type ref struct{ t, off, n int }

func devView(p uintptr, n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

// where says how each rank runs: "host" (CPU tensors), "device" (the coded
// path) or "staged" (the shim's host copies of CUDA tensors).
func runTensorOps(t *testing.T, r *rig, where []string, mk func(rank int) tensorOp) [][][]byte {
	t.Helper()
	n := len(r.comms)
	k := emuKernels(t)
	finals := make([][][]byte, n)
	type mem struct {
		host [][]byte
		dev  []uintptr
	}
	mems := make([]mem, n)
	ops := make([]*Op, n)
	for rank := 0; rank < n; rank++ {
		to := mk(rank)
		m := &mems[rank]
		views := make([][]byte, len(to.tensors))
		for i, init := range to.tensors {
			if where[rank] == "device" {
				p, err := k.Malloc(0, int64(max(len(init), 1)))
				require.NoError(t, err)
				require.NoError(t, k.CopyFromHost(0, p, init))
				m.dev = append(m.dev, p)
				views[i] = devView(p, len(init))
			} else {
				h := bytes.Clone(init)
				m.host = append(m.host, h)
				views[i] = h
			}
		}
		bufs := func(refs []ref) [][]byte {
			out := make([][]byte, len(refs))
			for i, x := range refs {
				out[i] = views[x.t][x.off : x.off+x.n : x.off+x.n]
			}
			return out
		}
		op := &Op{Kind: to.kind, DType: to.dt, ReduceOp: to.redop, Root: to.root, PreMul: to.premul, In: bufs(to.in), Out: bufs(to.out)}
		switch where[rank] {
		case "device":
			op.Dev = &DeviceOp{Index: 0, Engine: true}
		case "staged":
			op.Staged = true
		}
		ops[rank] = op
	}
	res := r.everyRank(func(rank int) *Op { return ops[rank] })
	for rank, x := range res {
		require.NoError(t, x.err, "rank %d (%s)", rank, where[rank])
		m := &mems[rank]
		if where[rank] != "device" {
			finals[rank] = m.host
			continue
		}
		for i, p := range m.dev {
			h := make([]byte, len(mk(rank).tensors[i]))
			require.NoError(t, k.CopyToHost(0, h, p))
			k.Free(0, p)
			finals[rank] = append(finals[rank], h)
		}
	}
	return finals
}

func randomData(dt dtype.DType, numel int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	es := dt.Size()
	b := make([]byte, numel*es)
	for i := 0; i < numel; i++ {
		v := float32(rng.NormFloat64() * 0.02)
		switch dt {
		case dtype.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(v))
		case dtype.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToF16(v))
		case dtype.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		default:
			for j := 0; j < es; j++ {
				b[i*es+j] = byte(rng.Uint32())
			}
		}
	}
	return b
}

// deviceOps are the ops every test below runs: the coded collectives and,
// staged by the engine, the ones the GPU does not code.
func deviceOps(n int, dt dtype.DType) map[string]func(rank int) tensorOp {
	es := dt.Size()
	const per = 9000 // elements per rank's block: several segments with a small segment size
	return map[string]func(rank int) tensorOp{
		"all_reduce": func(rank int) tensorOp {
			d := randomData(dt, n*per+5, uint64(100+rank))
			return tensorOp{kind: opkind.AllReduce, dt: dt, redop: reduce.Sum, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		},
		"all_reduce_product": func(rank int) tensorOp {
			d := randomData(dt, n*per, uint64(150+rank))
			return tensorOp{kind: opkind.AllReduce, dt: dt, redop: reduce.Product, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		},
		"all_reduce_max (staged)": func(rank int) tensorOp {
			d := randomData(dt, n*per, uint64(200+rank))
			return tensorOp{kind: opkind.AllReduce, dt: dt, redop: reduce.Max, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		},
		"all_reduce_avg (staged)": func(rank int) tensorOp {
			d := randomData(dt, n*per, uint64(250+rank))
			return tensorOp{kind: opkind.AllReduce, dt: dt, redop: reduce.Avg, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		},
		"reduce_scatter": func(rank int) tensorOp {
			in := randomData(dt, n*per, uint64(300+rank))
			to := tensorOp{kind: opkind.ReduceScatter, dt: dt, redop: reduce.Sum, tensors: [][]byte{in, make([]byte, per*es)},
				out: []ref{{1, 0, per * es}}}
			for j := 0; j < n; j++ {
				to.in = append(to.in, ref{0, j * per * es, per * es})
			}
			return to
		},
		"reduce_scatter_in_place": func(rank int) tensorOp {
			in := randomData(dt, n*per, uint64(350+rank))
			to := tensorOp{kind: opkind.ReduceScatter, dt: dt, redop: reduce.Sum, tensors: [][]byte{in},
				out: []ref{{0, rank * per * es, per * es}}}
			for j := 0; j < n; j++ {
				to.in = append(to.in, ref{0, j * per * es, per * es})
			}
			return to
		},
		"all_gather_in_place": func(rank int) tensorOp {
			out := make([]byte, n*per*es)
			copy(out[rank*per*es:], randomData(dt, per, uint64(400+rank)))
			to := tensorOp{kind: opkind.AllGather, dt: dt, tensors: [][]byte{out}, in: []ref{{0, rank * per * es, per * es}}}
			for j := 0; j < n; j++ {
				to.out = append(to.out, ref{0, j * per * es, per * es})
			}
			return to
		},
		"all_to_all_uneven": func(rank int) tensorOp {
			cnt := func(i, j int) int { return 3000*(j+1) + 7*i }
			var ins, outs int
			for j := 0; j < n; j++ {
				ins += cnt(rank, j)
				outs += cnt(j, rank)
			}
			to := tensorOp{kind: opkind.AllToAll, dt: dt, tensors: [][]byte{randomData(dt, ins, uint64(500+rank)), make([]byte, outs*es)}}
			var io, oo int
			for j := 0; j < n; j++ {
				to.in = append(to.in, ref{0, io, cnt(rank, j) * es})
				to.out = append(to.out, ref{1, oo, cnt(j, rank) * es})
				io += cnt(rank, j) * es
				oo += cnt(j, rank) * es
			}
			return to
		},
		"broadcast": func(rank int) tensorOp {
			d := randomData(dt, 2*per, uint64(600+rank))
			return tensorOp{kind: opkind.Broadcast, dt: dt, root: 1, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		},
		"gather (staged)": func(rank int) tensorOp {
			to := tensorOp{kind: opkind.Gather, dt: dt, root: 0, tensors: [][]byte{randomData(dt, 100, uint64(700+rank)), make([]byte, n*100*es)},
				in: []ref{{0, 0, 100 * es}}}
			if rank == 0 {
				for j := 0; j < n; j++ {
					to.out = append(to.out, ref{1, j * 100 * es, 100 * es})
				}
			}
			return to
		},
		"barrier": func(int) tensorOp { return tensorOp{kind: opkind.Barrier} },
	}
}

var devOpts = map[string]string{"compress": "always", "two_shot_min": "1024", "compress_min": "1024"}

// Every op on the coded path gives the bits the CPU path gives, with the
// GPU coding what the switcher codes (the emulation's counters prove the
// kernels ran: a host coder would have faulted on the protected memory).
func TestCodedPathMatchesTheCPUPath(t *testing.T) {
	const n = 3
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32} {
		host := newRigWith(t, n, "host", 60*time.Second, func(int) map[string]string { return devOpts })
		dev := newDevRig(t, n, devOpts)
		for name, mk := range deviceOps(n, dt) {
			t.Run(dt.String()+"/"+name, func(t *testing.T) {
				want := runTensorOps(t, host, []string{"host", "host", "host"}, mk)
				before := deviceCounts(dev)
				got := runTensorOps(t, dev, []string{"device", "device", "device"}, mk)
				for rank := range want {
					for i := range want[rank] {
						if !bytes.Equal(want[rank][i], got[rank][i]) {
							t.Fatalf("rank %d tensor %d differs from the CPU path", rank, i)
						}
					}
				}
				enc, dec, fold := diffCounts(before, deviceCounts(dev))
				coded := !strings.Contains(name, "staged") && name != "barrier"
				if coded && (enc == 0 || dec+fold == 0) {
					t.Fatalf("the GPU coded nothing (%d encodes, %d decodes, %d folds)", enc, dec, fold)
				}
				if !coded && enc+dec+fold != 0 {
					t.Fatalf("a staged op was coded on the GPU (%d encodes, %d decodes, %d folds)", enc, dec, fold)
				}
			})
		}
		// the statistics say where the CUDA ops ran
		for rank, c := range dev.comms {
			js, err := c.Stats()
			require.NoError(t, err)
			var st struct {
				Ops map[string]OpStats `json:"ops"`
			}
			require.NoError(t, json.Unmarshal(js, &st))
			ar := st.Ops["all_reduce"]
			require.Equal(t, int64(2), ar.GPUCoded, "rank %d: all_reduce SUM and PRODUCT coded on the GPU: %s", rank, js)
			require.Equal(t, int64(2), ar.GPUStaged, "rank %d: MAX and AVG staged: %s", rank, js)
		}
	}
}

type counts [3]int64

func deviceCounts(r *rig) counts {
	var c counts
	for _, cm := range r.comms {
		d, err := gpu.DeviceFor(cm.cfg.GPU, 0)
		if err != nil {
			continue
		}
		e, de, f := d.Counts()
		c[0], c[1], c[2] = c[0]+e, c[1]+de, c[2]+f
	}
	return c
}

func diffCounts(a, b counts) (enc, dec, fold int64) { return b[0] - a[0], b[1] - a[1], b[2] - a[2] }

// A mixed job: ranks that code their CUDA tensors on the GPU and ranks
// that stage them (or hold CPU tensors) run the same ops together, with
// the CPU path's bits.
func TestMixedCodedAndStagedRanks(t *testing.T) {
	const n = 3
	host := newRigWith(t, n, "host", 60*time.Second, func(int) map[string]string { return devOpts })
	dev := newDevRig(t, n, devOpts)
	for _, where := range [][]string{{"device", "staged", "device"}, {"staged", "device", "host"}} {
		for name, mk := range deviceOps(n, dtype.BFloat16) {
			t.Run(strings.Join(where, ",")+"/"+name, func(t *testing.T) {
				want := runTensorOps(t, host, []string{"host", "host", "host"}, mk)
				got := runTensorOps(t, dev, where, mk)
				for rank := range want {
					for i := range want[rank] {
						if !bytes.Equal(want[rank][i], got[rank][i]) {
							t.Fatalf("rank %d (%s) tensor %d differs from the CPU path", rank, where[rank], i)
						}
					}
				}
			})
		}
	}
}

// Sends and receives of CUDA tensors: coded on the GPU (compression
// always), uncoded (never), and between a GPU-coding rank and a host one.
func TestCodedPathSendRecv(t *testing.T) {
	for _, mode := range []string{"always", "never"} {
		dev := newDevRig(t, 2, map[string]string{"compress": mode})
		k := emuKernels(t)
		for _, pair := range [][2]string{{"device", "device"}, {"staged", "device"}, {"device", "host"}} {
			t.Run(mode+"/"+pair[0]+"->"+pair[1], func(t *testing.T) {
				src := randomData(dtype.BFloat16, 300000, 9)
				var sendBuf, recvBuf []byte
				var devs []uintptr
				mkBuf := func(where string, init []byte) []byte {
					if where != "device" {
						return bytes.Clone(init)
					}
					p, err := k.Malloc(0, int64(len(init)))
					require.NoError(t, err)
					require.NoError(t, k.CopyFromHost(0, p, init))
					devs = append(devs, p)
					return devView(p, len(init))
				}
				sendBuf = mkBuf(pair[0], src)
				recvBuf = mkBuf(pair[1], make([]byte, len(src)))
				send := &Op{Kind: opkind.Send, DType: dtype.BFloat16, Root: 1, Tag: 5, In: [][]byte{sendBuf}}
				recv := &Op{Kind: opkind.Recv, DType: dtype.BFloat16, Root: 0, Tag: 5, Out: [][]byte{recvBuf}}
				for i, op := range []*Op{send, recv} {
					switch pair[i] {
					case "device":
						op.Dev = &DeviceOp{Engine: true}
					case "staged":
						op.Staged = true
					}
				}
				before := deviceCounts(dev)
				rc := dev.submit(1, recv)
				sc := dev.submit(0, send)
				require.NoError(t, wait(t, sc).err)
				require.NoError(t, wait(t, rc).err)
				got := recvBuf
				if pair[1] == "device" {
					got = make([]byte, len(src))
					require.NoError(t, k.CopyToHost(0, got, devs[len(devs)-1]))
				}
				require.True(t, bytes.Equal(src, got), "payload differs")
				enc, dec, _ := diffCounts(before, deviceCounts(dev))
				if mode == "always" && (pair[0] == "device") != (enc > 0) {
					t.Fatalf("GPU encodes: %d", enc)
				}
				if mode == "always" && (pair[1] == "device") != (dec > 0) {
					t.Fatalf("GPU decodes: %d", dec)
				}
				for _, p := range devs {
					k.Free(0, p)
				}
			})
		}
	}
}

// Under auto the first large op measures the group, timing the GPU coder
// on the op's own device data; over loopback nothing is then coded, and
// the results are the CPU path's.
func TestCodedPathAutoProbes(t *testing.T) {
	const n = 2
	host := newRigWith(t, n, "host", 60*time.Second, func(int) map[string]string { return nil })
	dev := newDevRig(t, n, nil)
	mk := func(rank int) tensorOp {
		d := randomData(dtype.BFloat16, 600000, uint64(rank))
		return tensorOp{kind: opkind.AllReduce, dt: dtype.BFloat16, redop: reduce.Sum, tensors: [][]byte{d},
			in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
	}
	before := deviceCounts(dev)
	want := runTensorOps(t, host, []string{"host", "host"}, mk)
	got := runTensorOps(t, dev, []string{"device", "device"}, mk)
	for rank := range want {
		require.True(t, bytes.Equal(want[rank][0], got[rank][0]), "rank %d", rank)
	}
	for _, c := range dev.comms {
		require.True(t, c.z.profile.Measured, "the group measured itself")
		require.Zero(t, c.z.profile.Enc[2], "huff is never timed for GPU ranks")
		require.Positive(t, c.z.profile.Enc[1], "the GPU coder's speed")
	}
	enc, dec, _ := diffCounts(before, deviceCounts(dev))
	require.Positive(t, enc, "the probe timed the GPU encoder")
	require.Positive(t, dec, "the probe timed the GPU decoder")
}

// A rank that never joins: the others fail with a timeout naming the op,
// as on the CPU path, and their CUDA buffers are left alone.
func TestCodedPathTimeout(t *testing.T) {
	dev := newDevRig(t, 3, devOpts)
	for _, c := range dev.comms {
		c.SetTimeout(700 * time.Millisecond)
	}
	k := emuKernels(t)
	d := randomData(dtype.BFloat16, 20000, 1)
	var chans []chan result
	for rank := 0; rank < 2; rank++ {
		p, err := k.Malloc(0, int64(len(d)))
		require.NoError(t, err)
		require.NoError(t, k.CopyFromHost(0, p, d))
		defer k.Free(0, p)
		b := devView(p, len(d))
		chans = append(chans, dev.submit(rank, &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum,
			In: [][]byte{b}, Out: [][]byte{b}, Dev: &DeviceOp{Engine: true}}))
	}
	for rank, ch := range chans {
		err := wait(t, ch).err
		require.Error(t, err, "rank %d", rank)
		// its own timeout, or the first rank's, which breaks the group
		require.Contains(t, err.Error(), "all_reduce")
		require.Regexp(t, " (Timed out|closed|timeout) ", err.Error(), "rank %d", rank)
	}
}

// CUDA tensors the group's lossy policy codes are planned host-staged
// (package quant codes host memory), on every rank alike, and the staged
// run gives the host run's bits; tensors the policy leaves exact (too
// small, MAX) keep their GPU path.
func TestLossyCUDATensorsPlannedStaged(t *testing.T) {
	const n, per = 2, 40000
	opts := map[string]string{"lossy": "all_gather=int8,all_reduce=int8"}
	dev := newDevRig(t, n, opts)
	host := newRigWith(t, n, "host", 60*time.Second, func(int) map[string]string { return opts })
	gather := func(numel int) func(rank int) tensorOp {
		return func(rank int) tensorOp {
			es := dtype.BFloat16.Size()
			to := tensorOp{kind: opkind.AllGather, dt: dtype.BFloat16,
				tensors: [][]byte{randomData(dtype.BFloat16, numel, uint64(800+rank)), make([]byte, n*numel*es)},
				in:      []ref{{0, 0, numel * es}}}
			for j := 0; j < n; j++ {
				to.out = append(to.out, ref{1, j * numel * es, numel * es})
			}
			return to
		}
	}
	reduceOf := func(op reduce.Op) func(rank int) tensorOp {
		return func(rank int) tensorOp {
			d := randomData(dtype.Float32, n*per, uint64(900+rank))
			return tensorOp{kind: opkind.AllReduce, dt: dtype.Float32, redop: op, tensors: [][]byte{d},
				in: []ref{{0, 0, len(d)}}, out: []ref{{0, 0, len(d)}}}
		}
	}
	plans := func(mk func(rank int) tensorOp) []gpu.Plan {
		out := make([]gpu.Plan, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for rank := 0; rank < n; rank++ {
			wg.Add(1)
			go func(rank int) {
				defer wg.Done()
				to := mk(rank)
				bufs := func(refs []ref) [][]byte {
					b := make([][]byte, len(refs))
					for i, x := range refs {
						b[i] = to.tensors[x.t][x.off : x.off+x.n]
					}
					return b
				}
				op := &Op{Kind: to.kind, DType: to.dt, ReduceOp: to.redop, In: bufs(to.in), Out: bufs(to.out), Dev: &DeviceOp{Index: 0}}
				out[rank], errs[rank] = dev.comms[rank].DevicePlan(op)
			}(rank)
		}
		wg.Wait()
		for rank, err := range errs {
			require.NoError(t, err, "rank %d", rank)
		}
		return out
	}
	for name, c := range map[string]struct {
		mk    func(rank int) tensorOp
		lossy bool
	}{
		"all_gather int8":            {gather(per), true},
		"all_reduce int8":            {reduceOf(reduce.Sum), true},
		"all_gather under min_bytes": {gather(1000), false},
		"all_reduce max":             {reduceOf(reduce.Max), false},
	} {
		t.Run(name, func(t *testing.T) {
			for rank, p := range plans(c.mk) {
				lossyPlan := p.Path == gpu.PathStaged && strings.Contains(p.Reason, "lossy policy codes it (int8)")
				require.Equal(t, c.lossy, lossyPlan, "rank %d: %+v", rank, p)
			}
			if !c.lossy {
				return
			}
			want := runTensorOps(t, host, []string{"host", "host"}, c.mk)
			got := runTensorOps(t, dev, []string{"staged", "staged"}, c.mk)
			for rank := range want {
				for i := range want[rank] {
					require.True(t, bytes.Equal(want[rank][i], got[rank][i]), "rank %d tensor %d: staged differs from the host run", rank, i)
				}
			}
			if c.mk(0).kind == opkind.AllGather { // int8 changed the values
				require.False(t, bytes.Equal(got[0][1][:per*2], c.mk(0).tensors[0]), "the gathered values are exact")
			}
		})
	}
}
