package collective

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/conntest"
)

func TestSegSize(t *testing.T) {
	for _, tu := range []tuning{
		{segMin: 256 << 10, segMax: 4 << 20, segPer: 8},
		{segMin: 1, segMax: 1, segPer: 1},
		{segMin: 8, segMax: 256, segPer: 4},
	} {
		for _, gran := range []int{1, 2, 4, 8, 16} {
			for _, n := range []int{0, 1, 7, 4096, 1 << 20, 1<<20 + 12, 1 << 30} {
				n -= n % gran
				s := tu.segSize(n, gran)
				if s <= 0 || s%gran != 0 {
					t.Fatalf("%+v gran %d n %d: segment %d not a positive multiple of the element", tu, gran, n, s)
				}
				if segs := bufs.CeilDiv(n, s); segs > maxSegments {
					t.Fatalf("%+v gran %d n %d: %d segments overflow the slot", tu, gran, n, segs)
				}
				cut := tu.cut(make([]byte, min(n, 1<<21)), gran)
				total := 0
				for k := range cut.n {
					total += len(cut.at(k))
				}
				if total != len(cut.buf) {
					t.Fatalf("segments cover %d of %d bytes", total, len(cut.buf))
				}
			}
		}
	}
}

func TestPool(t *testing.T) {
	p := NewPool()
	for _, n := range []int{1, 1000, 1024, 1025, 1 << 20, 3<<20 + 1} {
		b := p.Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d) has len %d", n, len(b))
		}
		if c := cap(b); c&(c-1) != 0 {
			t.Fatalf("Get(%d) has non-class capacity %d", n, c)
		}
		p.Put(b)
	}
	if b := p.Get(0); len(b) != 0 {
		t.Fatal("Get(0) not empty")
	}
	p.Put(make([]byte, 3000)) // not a class size: dropped, not reused
	var nilPool *Pool
	if b := nilPool.Get(10); len(b) != 10 {
		t.Fatal("nil pool Get")
	}
	nilPool.Put(make([]byte, 1024))

	// Concurrent use.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				n := 1 + (g*7919+i*104729)%(1<<17)
				b := p.Get(n)
				for j := range b {
					b[j] = byte(g)
				}
				for j := range b {
					if b[j] != byte(g) {
						panic("pool handed out a shared buffer")
					}
				}
				p.Put(b)
			}
		})
	}
	wg.Wait()
}

// benchAllReduce measures the ring over the in-memory Conn. The conntest.World
// copies every message twice (into and out of its mailbox), so compare
// against BenchmarkMemConnCopy rather than against a real transport; the
// point is to catch algorithmic overhead (extra copies, serialisation).
func benchAllReduce(b *testing.B, n, size int) {
	rng := rand.New(rand.NewPCG(1, 1))
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = randData(rng, dtype.Float32, size/4)
	}
	pool := NewPool()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for range b.N {
		w := conntest.NewWorld(n)
		conns := w.Conns()
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				a := Args{DType: dtype.Float32, In: [][]byte{bufs[r]}, Out: [][]byte{bufs[r]}, Pool: pool}
				if err := AllReduce(context.Background(), conns[r], a); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
}

func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("n%d/%dKiB", n, size>>10), func(b *testing.B) { benchAllReduce(b, n, size) })
		}
	}
}

func BenchmarkAllGather(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int{1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("n%d/%dKiB", n, size>>10), func(b *testing.B) {
				shard := size / n
				ins := make([][]byte, n)
				outs := make([][][]byte, n)
				for r := range n {
					ins[r] = make([]byte, shard)
					outs[r] = make([][]byte, n)
					for j := range n {
						outs[r][j] = make([]byte, shard)
					}
				}
				pool := NewPool()
				b.SetBytes(int64(size))
				for range b.N {
					w := conntest.NewWorld(n)
					conns := w.Conns()
					var wg sync.WaitGroup
					for r := range n {
						wg.Go(func() {
							a := Args{DType: dtype.Float32, In: [][]byte{ins[r]}, Out: outs[r], Pool: pool}
							if err := AllGather(context.Background(), conns[r], a); err != nil {
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

// BenchmarkMemConnCopy is the floor for BenchmarkAllReduce at n=2: the
// bytes a rank sends in a ring all-reduce, pushed through a conntest.World
// between two goroutines with no reduction.
func BenchmarkMemConnCopy(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			src, dst := make([]byte, size), make([]byte, size)
			b.SetBytes(int64(size))
			seg := 4 << 20
			for range b.N {
				w := conntest.NewWorld(2)
				cs := w.Conns()
				var wg sync.WaitGroup
				wg.Go(func() {
					for k := 0; k*seg < size; k++ {
						_ = cs[0].Send(context.Background(), 1, Slot(0, k), src[k*seg:min(size, (k+1)*seg)])
					}
				})
				for k := 0; k*seg < size; k++ {
					_ = cs[1].Recv(context.Background(), 0, Slot(0, k), dst[k*seg:min(size, (k+1)*seg)])
				}
				wg.Wait()
			}
		})
	}
}
