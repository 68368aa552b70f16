package zcoll

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Benchmarks over loopback TCP (conntest.TCPMesh, shaped like the engine's
// transport), against package collective's pipelined ring on the same
// mesh. Throughput is per byte of the buffer being reduced (or gathered).
//
//	go test -run '^$' -bench 'TCPAllReduce/(ring|plain)/' -benchtime 5x ./backend/zcoll/
//
// Sub-benchmark names: impl/dtype/nN/SIZE, impl one of ring (collective),
// plain, zip3, huff, auto (framed), and zip3d2, huffd2 (design 2 inside the
// reduce-scatter). The data is Gaussian (sigma 0.02); all-reduce runs out
// of place (In is copied to Out first, by both implementations) so that
// every iteration sees the same data. "wire/op" is the payload bytes sent
// per operation, "ratio" raw/wire, "cpu-ms/op" the process's CPU time
// (user+system, so including the kernel's socket copies) per operation,
// which a loaded machine disturbs less than the wall time.

type benchImpl struct {
	name string
	plan Plan
	ring bool
}

var benchImpls = []benchImpl{
	{name: "ring", ring: true},
	{name: "plain"},
	{name: "zip3", plan: Plan{Framed: true, Kind: codec.Zip3}},
	{name: "huff", plan: Plan{Framed: true, Kind: codec.Huff}},
	{name: "auto", plan: Plan{Framed: true, Kind: codec.Auto}},
	{name: "zip3d2", plan: Plan{Framed: true, Kind: codec.Zip3, A2ADesign: 2}},
	{name: "huffd2", plan: Plan{Framed: true, Kind: codec.Huff, A2ADesign: 2}},
}

var benchSizes = []int{1 << 20, 16 << 20, 64 << 20, 256 << 20}

func benchGauss(seed uint64, dt dtype.DType, nbytes int) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	numel := nbytes / dt.Size()
	b := make([]byte, numel*dt.Size())
	for i := range numel {
		store(b, dt.Size(), i, fromFloat(dt, rng.NormFloat64()*0.02))
	}
	return b
}

// cpuTime is the process's user+system CPU time in ns: on a shared
// machine it is a steadier measure of an algorithm's cost than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// runTCP runs one operation per iteration on every rank of a fresh mesh.
func runTCP(b *testing.B, n, size int, op func(ctx context.Context, c *conntest.TCPConn, r int) error) {
	m, err := conntest.NewTCPMesh(n, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.SetBytes(int64(size))
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				if err := op(context.Background(), m.Conn(r, uint64(i)), r); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(m.Unexpected())/float64(b.N), "unexpected/op")
	b.ReportMetric(float64(m.SentBytes())/float64(b.N), "wire/op")
}

func BenchmarkTCPAllReduce(b *testing.B) {
	for _, impl := range benchImpls {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			for _, n := range []int{2, 4} {
				for _, size := range benchSizes {
					b.Run(fmt.Sprintf("%s/%v/n%d/%dMiB", impl.name, dt, n, size>>20), func(b *testing.B) {
						pool := collective.NewPool()
						ins, outs := make([][]byte, n), make([][]byte, n)
						for r := range n {
							ins[r] = benchGauss(uint64(r), dt, size)
							outs[r] = make([]byte, len(ins[r]))
						}
						st := new(Stats)
						runTCP(b, n, size, func(ctx context.Context, c *conntest.TCPConn, r int) error {
							ca := collective.Args{DType: dt, Op: reduce.Sum, In: [][]byte{ins[r]}, Out: [][]byte{outs[r]}, Pool: pool}
							if impl.ring {
								return collective.AllReduce(ctx, c, ca)
							}
							return AllReduce(ctx, c, Args{Args: ca, Plan: impl.plan, Stats: st})
						})
						if r := st.Ratio(); r > 0 {
							b.ReportMetric(r, "ratio")
						}
					})
				}
			}
		}
	}
}

func BenchmarkTCPAllGather(b *testing.B) {
	for _, impl := range benchImpls[:5] {
		for _, dt := range []dtype.DType{dtype.BFloat16} {
			for _, n := range []int{2, 4} {
				for _, size := range benchSizes {
					b.Run(fmt.Sprintf("%s/%v/n%d/%dMiB", impl.name, dt, n, size>>20), func(b *testing.B) {
						pool := collective.NewPool()
						ins, outs := make([][]byte, n), make([][][]byte, n)
						for r := range n {
							ins[r] = benchGauss(uint64(r), dt, size/n)
							outs[r] = make([][]byte, n)
							for j := range n {
								outs[r][j] = make([]byte, len(ins[r]))
							}
						}
						st := new(Stats)
						runTCP(b, n, size, func(ctx context.Context, c *conntest.TCPConn, r int) error {
							ca := collective.Args{DType: dt, In: [][]byte{ins[r]}, Out: outs[r], Pool: pool}
							if impl.ring {
								return collective.AllGather(ctx, c, ca)
							}
							return AllGather(ctx, c, Args{Args: ca, Plan: impl.plan, Stats: st})
						})
						if r := st.Ratio(); r > 0 {
							b.ReportMetric(r, "ratio")
						}
					})
				}
			}
		}
	}
}

func BenchmarkTCPAllToAll(b *testing.B) {
	for _, impl := range benchImpls {
		for _, n := range []int{2, 4} {
			for _, size := range benchSizes[:3] {
				b.Run(fmt.Sprintf("%s/bfloat16/n%d/%dMiB", impl.name, n, size>>20), func(b *testing.B) {
					dt := dtype.BFloat16
					pool := collective.NewPool()
					ins, outs := make([][][]byte, n), make([][][]byte, n)
					for r := range n {
						ins[r], outs[r] = make([][]byte, n), make([][]byte, n)
						for j := range n {
							ins[r][j] = benchGauss(uint64(r*n+j), dt, size/n)
							outs[r][j] = make([]byte, size/n)
						}
					}
					st := new(Stats)
					runTCP(b, n, size, func(ctx context.Context, c *conntest.TCPConn, r int) error {
						ca := collective.Args{DType: dt, In: ins[r], Out: outs[r], Pool: pool}
						if impl.ring {
							return collective.AllToAll(ctx, c, ca)
						}
						return AllToAll(ctx, c, Args{Args: ca, Plan: impl.plan, Stats: st})
					})
					if r := st.Ratio(); r > 0 {
						b.ReportMetric(r, "ratio")
					}
				})
			}
		}
	}
}

func BenchmarkTCPBroadcast(b *testing.B) {
	for _, impl := range benchImpls[:5] {
		for _, n := range []int{2, 4} {
			for _, size := range benchSizes[:3] {
				b.Run(fmt.Sprintf("%s/bfloat16/n%d/%dMiB", impl.name, n, size>>20), func(b *testing.B) {
					dt := dtype.BFloat16
					pool := collective.NewPool()
					bufs := make([][]byte, n)
					for r := range n {
						bufs[r] = benchGauss(1, dt, size)
					}
					st := new(Stats)
					runTCP(b, n, size, func(ctx context.Context, c *conntest.TCPConn, r int) error {
						ca := collective.Args{DType: dt, In: [][]byte{bufs[r]}, Out: [][]byte{bufs[r]}, Pool: pool}
						if impl.ring {
							return collective.Broadcast(ctx, c, ca)
						}
						return Broadcast(ctx, c, Args{Args: ca, Plan: impl.plan, Stats: st})
					})
					if r := st.Ratio(); r > 0 {
						b.ReportMetric(r, "ratio")
					}
				})
			}
		}
	}
}

// BenchmarkMemAllReduce runs on the in-memory world: no sockets, so it
// shows the algorithm's own CPU cost (codec, reduction, copies).
func BenchmarkMemAllReduce(b *testing.B) {
	for _, impl := range benchImpls[1:5] {
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
			n, size := 4, 16<<20
			b.Run(fmt.Sprintf("%s/%v/n%d/%dMiB", impl.name, dt, n, size>>20), func(b *testing.B) {
				pool := collective.NewPool()
				ins, outs := make([][]byte, n), make([][]byte, n)
				for r := range n {
					ins[r] = benchGauss(uint64(r), dt, size)
					outs[r] = make([]byte, size)
				}
				b.SetBytes(int64(size))
				for b.Loop() {
					w := conntest.NewWorld(n)
					cs := w.Conns()
					var wg sync.WaitGroup
					for r := range n {
						wg.Go(func() {
							a := Args{Args: collective.Args{DType: dt, Op: reduce.Sum, In: [][]byte{ins[r]}, Out: [][]byte{outs[r]}, Pool: pool}, Plan: impl.plan}
							if err := AllReduce(context.Background(), cs[r], a); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
				}
			})
		}
	}
}
