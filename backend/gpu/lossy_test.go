package gpu

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/switcher"
)

// hostLossy is what every rank must hold for shard src: package quant's
// message of it, decoded (the host path's bytes).
func hostLossy(t *testing.T, src []byte, dt dtype.DType, code lossy.Coding) []byte {
	t.Helper()
	main := make([]byte, quant.MainLen(code.Mode, len(src)/dt.Size(), code.Block))
	exact, err := quant.Encode(main, nil, src, dt, code.Mode, code.Block)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(src))
	if err := quant.Decode(out, main, exact, dt); err != nil {
		t.Fatal(err)
	}
	return out
}

// lossyWorld is n ranks on the emulated kernels and the fake NCCL, and a
// function that keeps the test's buffers alive (they stand for device
// memory) until it ends.
func lossyWorld(t *testing.T, n int, hostOf func(int) string, flat bool) (*world, func([]byte) []byte) {
	if testing.Short() {
		t.Skip("the emulated kernels are slow")
	}
	w := newWorld(t, worldOpts{n: n, mode: switcher.Auto, kernels: emuKernels(t), timeout: 60 * time.Second, hostOf: hostOf, flat: flat})
	var keep [][]byte
	t.Cleanup(func() { keep = nil })
	return w, func(x []byte) []byte { keep = append(keep, x); return x }
}

// A lossy all_gather of CUDA tensors: quantized by the (emulated) kernels,
// moved by the fake NCCL, decoded on every rank into the bytes the host
// path gives, with NaN and Inf blocks exact, the wire below the raw bytes.
func TestLossyAllGatherOnEmulatedKernels(t *testing.T) {
	const n = 3
	w, hold := lossyWorld(t, n, nil, false)
	codings := []lossy.Coding{{Mode: quant.Int8, Block: 2048}, {Mode: quant.FP8, Block: 256}, {Mode: quant.Int4, Block: 256}}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
		for ci, code := range codings {
			es := dt.Size()
			per := 5000 + 37*ci // a tail block
			special := ci == 1  // rank 1's shard holds a NaN and an Inf: exact blocks
			contiguousOut := ci != 2
			t.Run(fmt.Sprintf("%v/%v", dt, code), func(t *testing.T) {
				ins := make([][]byte, n)
				outs := make([][][]byte, n)
				for r := range ins {
					ins[r] = hold(gradients(dt, per, uint64(50+r)))
					if special && r == 1 {
						narrow(dt, ins[r][10*es:], float32(math.NaN()))
						narrow(dt, ins[r][(per-1)*es:], float32(math.Inf(-1)))
					}
					whole := hold(make([]byte, n*per*es))
					for j := range n {
						if contiguousOut {
							outs[r] = append(outs[r], whole[j*per*es:(j+1)*per*es])
						} else {
							outs[r] = append(outs[r], hold(make([]byte, per*es)))
						}
					}
				}
				mk := func(r int) *Op {
					op := &Op{Kind: opkind.AllGather, DType: dt, Lossy: code, In: []Buf{{Ptr: addr(ins[r]), Bytes: per * es}},
						Timeout: w.o.timeout}
					for j := range n {
						op.Out = append(op.Out, Buf{Ptr: addr(outs[r][j]), Bytes: per * es})
					}
					return op
				}
				for r, p := range w.planAll(func() *Op { return mk(0) }) {
					if p.Path != PathNCCL || !strings.Contains(p.Reason, "quantized on the GPU") {
						t.Fatalf("rank %d planned %+v", r, p)
					}
				}
				var ops [n]*Op
				noErrors(t, "all_gather", w.run(func(r int) *Op { ops[r] = mk(r); return ops[r] }))
				for j := range n {
					want := hostLossy(t, ins[j], dt, code)
					for r := range n {
						if string(outs[r][j]) != string(want) {
							t.Fatalf("rank %d's copy of rank %d's shard differs from the host path's", r, j)
						}
					}
					if string(want) == string(ins[j]) {
						t.Fatalf("rank %d's shard came back exact: nothing was quantized", j)
					}
				}
				for r := range n {
					raw := int64((n - 1) * per * es)
					if ops[r].Wire <= 0 || ops[r].Wire >= raw || !strings.Contains(ops[r].Decision.Why, "lossy") {
						t.Fatalf("rank %d: wire %d of %d raw bytes, decision %+v", r, ops[r].Wire, raw, ops[r].Decision)
					}
				}
			})
		}
	}
}

// Ranks whose policies code the op differently fail it on every rank,
// naming both, before any payload moves; the group stays usable.
func TestLossyPolicyMismatchOnGPU(t *testing.T) {
	k := emuKernels(t)
	const n = 2
	w := newWorld(t, worldOpts{n: n, mode: switcher.Auto, kernels: k, timeout: 30 * time.Second})
	dt, per := dtype.BFloat16, 4096
	ins := [][]byte{gradients(dt, per, 1), gradients(dt, per, 2)}
	outs := [][]byte{make([]byte, n*per*2), make([]byte, n*per*2)}
	mk := func(r int, code lossy.Coding) *Op {
		op := &Op{Kind: opkind.AllGather, DType: dt, Lossy: code, In: []Buf{{Ptr: addr(ins[r]), Bytes: per * 2}}}
		for j := range n {
			op.Out = append(op.Out, Buf{Ptr: addr(outs[r]) + uintptr(j*per*2), Bytes: per * 2})
		}
		return op
	}
	int8c, fp8c := lossy.Coding{Mode: quant.Int8, Block: 2048}, lossy.Coding{Mode: quant.FP8, Block: 256}
	errs := w.run(func(r int) *Op {
		if r == 0 {
			return mk(r, int8c)
		}
		return mk(r, fp8c)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks disagree on the lossy policy") ||
			!strings.Contains(err.Error(), "int8") || !strings.Contains(err.Error(), "fp8") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	noErrors(t, "the next op", w.run(func(r int) *Op { return mk(r, int8c) }))
	for r := range n {
		for j := range n {
			if string(outs[r][j*per*2:(j+1)*per*2]) != string(hostLossy(t, ins[j], dt, int8c)) {
				t.Fatalf("after the mismatch: rank %d slot %d", r, j)
			}
		}
	}
}

// On hosts the policy is checked before the exact stage moves anything:
// a reduce_scatter whose ranks code it differently, or whose shapes
// differ, fails on every rank naming the difference, and the group stays
// usable.
func TestLossyPolicyMismatchOnHostsOnGPU(t *testing.T) {
	const n = 4
	w, hold := lossyWorld(t, n, func(r int) string { return fmt.Sprintf("host%d", r/2) }, false)
	dt, per := dtype.BFloat16, 4096
	flat := make([][]byte, n)
	for r := range flat {
		flat[r] = hold(gradients(dt, n*per, uint64(r+1)))
	}
	out := hold(make([]byte, n*per*2))
	mk := func(r int, code lossy.Coding, per int) *Op {
		op := &Op{Kind: opkind.ReduceScatter, DType: dt, ReduceOp: reduce.Sum, Lossy: code,
			Out: []Buf{{Ptr: addr(out) + uintptr(r*per*2), Bytes: per * 2}}}
		for j := range n {
			op.In = append(op.In, Buf{Ptr: addr(flat[r]) + uintptr(j*per*2), Bytes: per * 2})
		}
		return op
	}
	int8c, int4c := lossy.Coding{Mode: quant.Int8, Block: 2048}, lossy.Coding{Mode: quant.Int4, Block: 256}
	for _, c := range []struct {
		name string
		mk   func(r int) *Op
		want string
	}{
		{"policy", func(r int) *Op {
			if r == 3 {
				return mk(r, int4c, per)
			}
			return mk(r, int8c, per)
		}, "ranks disagree on the lossy policy"},
		{"shape", func(r int) *Op { return mk(r, int8c, per-256*(r%2)) }, "ranks disagree on the lossy policy"},
	} {
		for r, err := range w.run(c.mk) {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s: rank %d: %v", c.name, r, err)
			}
		}
	}
	noErrors(t, "the next op", w.run(func(r int) *Op { return mk(r, int8c, per) }))
}

// hostReduce runs backend/lossy's reduce_scatter (ins[r]: rank r's n
// contributions) or all_reduce (ins[r][0]: rank r's tensor) on an
// in-memory world with the host layout given (nil: one hop): the host
// path's bytes.
func hostReduce(t *testing.T, kind opkind.Kind, ins [][][]byte, outLen int, dt dtype.DType, code lossy.Coding, avg int, layout [][]int) [][]byte {
	t.Helper()
	n := len(ins)
	w := conntest.NewWorld(n)
	conns := w.Conns()
	outs := make([][]byte, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		outs[r] = make([]byte, outLen)
		a := collective.Args{DType: dt, In: ins[r], Out: [][]byte{outs[r]}}
		wg.Go(func() {
			if kind == opkind.ReduceScatter {
				errs[r] = lossy.ReduceScatter(ctx, conns[r], a, code, layout, avg)
			} else {
				errs[r] = lossy.AllReduce(ctx, conns[r], a, code, layout, avg)
			}
		})
	}
	wg.Wait()
	conntest.MustOK(t, w, errs)
	return outs
}

// Lossy reduce_scatter and all_reduce (SUM and AVG, in place and not) of
// CUDA tensors, on the (emulated) kernels and the fake NCCL, give the host
// path's bytes on every rank, NaN included.
func TestLossyReductionsOnEmulatedKernels(t *testing.T) {
	lossyReductions(t, 3, nil, false)
}

// The same on hosts, six ranks as two hosts of three and as three hosts of
// two, their ranks interleaved (rank r on host r%hosts): the host path's
// hierarchical numerics (exact host sums in local-rank order, then one
// coding per host, added in host order along the rails), which differ from
// the one hop's. Three addends make both orders matter. With hierarchy=flat
// (Config.Flat), the one hop's, as the host path runs then.
func TestLossyReductionsOnHostsOnEmulatedKernels(t *testing.T) {
	for _, h := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d hosts", h), func(t *testing.T) {
			lossyReductions(t, 6, func(r int) string { return fmt.Sprintf("host%d", r%h) }, false)
		})
	}
	t.Run("2 hosts, flat", func(t *testing.T) {
		lossyReductions(t, 6, func(r int) string { return fmt.Sprintf("host%d", r%2) }, true)
	})
}

func lossyReductions(t *testing.T, n int, hostOf func(int) string, flat bool) {
	w, hold := lossyWorld(t, n, hostOf, flat)
	var layout [][]int // the host path's
	if hostOf != nil && !flat {
		ids := make([]string, n)
		for r := range ids {
			ids[r] = hostOf(r)
		}
		layout = hosts.Group(ids)
	}
	// differs is called with the one hop's result on hosts: at least one
	// case must differ from it, or the hierarchy went unchecked.
	hierSeen := false
	differs := func(want, oneHop [][]byte) {
		for r := range want {
			if string(want[r]) != string(oneHop[r]) {
				hierSeen = true
			}
		}
	}
	codings := []lossy.Coding{{Mode: quant.Int8, Block: 2048}, {Mode: quant.Int4, Block: 256}, {Mode: quant.FP8, Block: 256}}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
		es := dt.Size()
		for ci, code := range codings {
			redop := []reduce.Op{reduce.Sum, reduce.Avg}[ci%2]
			avg := map[reduce.Op]int{reduce.Sum: 1, reduce.Avg: n}[redop]
			t.Run(fmt.Sprintf("%v/%v/reduce_scatter/%v", dt, code, redop), func(t *testing.T) {
				per := 4100 + 13*ci
				flat := make([][]byte, n)
				outs := make([][]byte, n)
				host := make([][][]byte, n)
				for r := range n {
					flat[r] = hold(gradients(dt, n*per, uint64(60+r)))
					if r == 2 {
						narrow(dt, flat[r][5*es:], float32(math.NaN()))
					}
					outs[r] = hold(make([]byte, per*es))
					for j := range n {
						host[r] = append(host[r], append([]byte(nil), flat[r][j*per*es:(j+1)*per*es]...))
					}
				}
				want := hostReduce(t, opkind.ReduceScatter, host, per*es, dt, code, avg, layout)
				if layout != nil {
					differs(want, hostReduce(t, opkind.ReduceScatter, host, per*es, dt, code, avg, nil))
				}
				ops := make([]*Op, n)
				noErrors(t, "reduce_scatter", w.run(func(r int) *Op {
					op := &Op{Kind: opkind.ReduceScatter, DType: dt, ReduceOp: redop, Lossy: code, Out: []Buf{{Ptr: addr(outs[r]), Bytes: per * es}}}
					for j := range n {
						op.In = append(op.In, Buf{Ptr: addr(flat[r]) + uintptr(j*per*es), Bytes: per * es})
					}
					ops[r] = op
					return op
				}))
				// the bytes uncoded: to every other rank (one hop), or
				// inside the host then a float32 partial per other host
				raw := (n - 1) * per * es
				if layout != nil {
					H, L := len(layout), len(layout[0])
					raw = (L-1)*H*per*es + (H-1)*per*4
				}
				for r := range n {
					if string(outs[r]) != string(want[r]) {
						t.Fatalf("rank %d: reduce_scatter differs from the host path's", r)
					}
					if ops[r].Wire <= 0 || ops[r].Wire >= int64(raw) {
						t.Fatalf("rank %d: wire %d of %d bytes uncoded", r, ops[r].Wire, raw)
					}
				}
			})
			t.Run(fmt.Sprintf("%v/%v/all_reduce/%v", dt, code, redop), func(t *testing.T) {
				numel := 2*n*lossy.Unit + 777 + ci
				if ci == 2 {
					numel = lossy.Unit + 952 // two units for three or four ranks: rank 0's shard is empty
				}
				inPlace := ci != 1
				ins := make([][]byte, n)
				outs := make([][]byte, n)
				host := make([][][]byte, n)
				for r := range n {
					ins[r] = hold(gradients(dt, numel, uint64(70+r)))
					if r == 1 {
						narrow(dt, ins[r][(numel-3)*es:], float32(math.Inf(1)))
					}
					host[r] = [][]byte{append([]byte(nil), ins[r]...)}
					outs[r] = ins[r]
					if !inPlace {
						outs[r] = hold(make([]byte, numel*es))
					}
				}
				want := hostReduce(t, opkind.AllReduce, host, numel*es, dt, code, avg, layout)
				if layout != nil {
					differs(want, hostReduce(t, opkind.AllReduce, host, numel*es, dt, code, avg, nil))
				}
				noErrors(t, "all_reduce", w.run(func(r int) *Op {
					return &Op{Kind: opkind.AllReduce, DType: dt, ReduceOp: redop, Lossy: code,
						In: []Buf{{Ptr: addr(ins[r]), Bytes: numel * es}}, Out: []Buf{{Ptr: addr(outs[r]), Bytes: numel * es}}}
				}))
				for r := range n {
					if string(outs[r]) != string(want[r]) {
						t.Fatalf("rank %d: all_reduce differs from the host path's", r)
					}
				}
				if string(want[0]) != string(want[n-1]) {
					t.Fatal("the host path's ranks differ")
				}
			})
		}
	}
	if layout != nil && !hierSeen {
		t.Fatal("on hosts, no case's result differed from the one hop's: the hierarchy went unchecked")
	}
}
