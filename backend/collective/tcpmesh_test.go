package collective

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/zipccl/zipccl/backend/internal/conntest"
)

// newTCPMesh connects n ranks over loopback TCP (see conntest.TCPMesh):
// real socket costs, and a count of messages that arrived before their
// receive was posted.
func newTCPMesh(tb testing.TB, n int) *conntest.TCPMesh {
	tb.Helper()
	m, err := conntest.NewTCPMesh(n, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// The TCP mesh carries a real collective correctly.
func TestTCPMesh(t *testing.T) {
	setTuning(t, false)
	m := newTCPMesh(t, 3)
	defer m.Close()
	xs := [][]byte{make([]byte, 4000), make([]byte, 4000), make([]byte, 4000)}
	for r, x := range xs {
		for i := range x {
			x[i] = byte(r + i)
		}
	}
	want := refAllReduce(2, 0, [][]byte{clone(xs[0]), clone(xs[1]), clone(xs[2])}, false)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := range 3 {
		wg.Go(func() {
			errs[r] = AllReduce(context.Background(), m.Conn(r, 1), Args{DType: 2, In: [][]byte{xs[r]}, Out: [][]byte{xs[r]}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		sameBytes(t, "tcp allreduce", xs[r], want)
	}
}

func benchTCP(b *testing.B, n, size int, op opFunc, mk func(r int) Args) {
	m := newTCPMesh(b, n)
	defer m.Close()
	args := make([]Args, n)
	for r := range n {
		args[r] = mk(r)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range b.N {
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				if err := op(context.Background(), m.Conn(r, uint64(i)), args[r]); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(m.Unexpected())/float64(b.N), "unexpected/op")
}

var tcpSizes = []int{1 << 20, 16 << 20, 64 << 20, 256 << 20}

// BenchmarkTCPAllReduce runs float32 all-reduce over loopback TCP, to be
// compared with gloo on the same machine.
func BenchmarkTCPAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				pool := NewPool()
				benchTCP(b, n, size, AllReduce, func(r int) Args {
					buf := make([]byte, size)
					return Args{DType: 1, In: [][]byte{buf}, Out: [][]byte{buf}, Pool: pool}
				})
			})
		}
	}
}

// BenchmarkTCPAllGather runs all-gather with a total output of size bytes.
func BenchmarkTCPAllGather(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				pool := NewPool()
				benchTCP(b, n, size, AllGather, func(r int) Args {
					out := make([][]byte, n)
					for j := range out {
						out[j] = make([]byte, size/n)
					}
					return Args{DType: 1, In: [][]byte{make([]byte, size/n)}, Out: out, Pool: pool}
				})
			})
		}
	}
}

// BenchmarkTCPRingRaw is the floor for BenchmarkTCPAllReduce: every rank
// streams the bytes a ring all-reduce sends, 2(n-1)/n of the buffer, to its
// successor while receiving as much from its predecessor, with no
// dependencies between messages and no reduction.
func BenchmarkTCPRingRaw(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range tcpSizes {
			b.Run(fmt.Sprintf("n%d/%dMiB", n, size>>20), func(b *testing.B) {
				m := newTCPMesh(b, n)
				defer m.Close()
				total := 2 * (n - 1) * (size / n)
				seg := 2 << 20
				src, dst := make([][]byte, n), make([][]byte, n)
				for r := range n {
					src[r], dst[r] = make([]byte, seg), make([]byte, seg)
				}
				b.SetBytes(int64(size))
				for i := range b.N {
					var wg sync.WaitGroup
					for r := range n {
						c := m.Conn(r, uint64(i))
						wg.Go(func() {
							for k := 0; k*seg < total; k++ {
								_ = c.Send(context.Background(), (r+1)%n, Slot(0, k), src[r][:min(seg, total-k*seg)])
							}
						})
						wg.Go(func() {
							for k := 0; k*seg < total; k++ {
								_ = c.Recv(context.Background(), (r+n-1)%n, Slot(0, k), dst[r][:min(seg, total-k*seg)])
							}
						})
					}
					wg.Wait()
				}
			})
		}
	}
}
