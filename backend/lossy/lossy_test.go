package lossy

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

func TestParse(t *testing.T) {
	p, err := Parse("all_gather=int8")
	require.NoError(t, err)
	require.Equal(t, Policy{AllGather: quant.Int8, MinBytes: DefaultMinBytes, FP8Block: 256}, p)
	require.Equal(t, "all_gather=int8,min_bytes=65536", p.String())
	p, err = Parse(" All_Gather = INT8 , min_bytes=0")
	require.NoError(t, err)
	require.Equal(t, 0, p.MinBytes)
	p, err = Parse("all_reduce=int8, reduce_scatter=int4,all_gather=int8")
	require.NoError(t, err)
	require.Equal(t, Policy{AllGather: quant.Int8, ReduceScatter: quant.Int4, AllReduce: quant.Int8, MinBytes: DefaultMinBytes, FP8Block: 256}, p)
	require.Equal(t, "all_gather=int8,reduce_scatter=int4,all_reduce=int8,min_bytes=65536", p.String())
	p, err = Parse("all_reduce=fp8,all_gather=fp8,reduce_scatter=FP8,fp8_block=64")
	require.NoError(t, err)
	require.Equal(t, Policy{AllGather: quant.FP8, ReduceScatter: quant.FP8, AllReduce: quant.FP8, MinBytes: DefaultMinBytes, FP8Block: 64}, p)
	require.Equal(t, "all_gather=fp8,reduce_scatter=fp8,all_reduce=fp8,fp8_block=64,min_bytes=65536", p.String())
	require.Equal(t, Coding{quant.FP8, 64}, p.Coding(opkind.AllReduce))
	p, err = Parse("all_reduce=fp8")
	require.NoError(t, err)
	require.Equal(t, Coding{quant.FP8, 256}, p.Coding(opkind.AllReduce), "TACO's default block")
	for _, lossless := range []string{"", "lossless", "all_gather=none"} {
		p, err = Parse(lossless)
		require.NoError(t, err)
		require.True(t, p.Lossless(), lossless)
		require.Equal(t, "lossless", p.String())
	}
	for spec, want := range map[string]string{
		"all_gather=int4":                 "makes no sense",
		"all_gather=int2":                 "unknown mode",
		"broadcast=int8":                  "unknown op",
		"all_reduce=fp8,fp8_block=2048":   "fp8_block",
		"all_reduce=fp8,fp8_block=100":    "power of two from 32 to 1024",
		"all_reduce=fp8,fp8_block=16":     "fp8_block",
		"all_gather":                      "not op=mode",
		"all_gather=int8,min_bytes=":      "min_bytes",
		"all_gather=int8,all_gather=int8": "twice",
	} {
		_, err := Parse(spec)
		require.ErrorContains(t, err, want, spec)
	}
}

func TestApplies(t *testing.T) {
	p := Policy{AllGather: quant.Int8, MinBytes: 1000}
	require.Equal(t, coding(quant.Int8), p.Applies(opkind.AllGather, dtype.BFloat16, reduce.Sum, 1000))
	require.Equal(t, Coding{}, p.Applies(opkind.AllGather, dtype.BFloat16, reduce.Sum, 999), "small tensors stay exact")
	require.Equal(t, Coding{}, p.Applies(opkind.AllGather, dtype.Int32, reduce.Sum, 1<<20), "integers stay exact")
	require.Equal(t, Coding{}, p.Applies(opkind.AllGather, dtype.Float64, reduce.Sum, 1<<20), "float64 stays exact")
	require.Equal(t, Coding{}, p.Applies(opkind.AllReduce, dtype.Float32, reduce.Sum, 1<<20), "all_reduce not asked")
	p.ReduceScatter = quant.Int4
	require.Equal(t, coding(quant.Int4), p.Applies(opkind.ReduceScatter, dtype.Float16, reduce.Avg, 1000))
	for _, op := range []reduce.Op{reduce.Max, reduce.Min, reduce.Product, reduce.PreMulSum} {
		require.Equal(t, Coding{}, p.Applies(opkind.ReduceScatter, dtype.Float16, op, 1<<20), "%v stays exact", op)
	}
	require.Equal(t, Coding{}, Policy{}.Applies(opkind.AllGather, dtype.Float32, reduce.Sum, 1<<20))
}

// gather runs AllGather on every rank of an in-memory world.
func gather(t *testing.T, shards [][]byte, dt dtype.DType, hosts [][]int) [][][]byte {
	t.Helper()
	n := len(shards)
	w := conntest.NewWorld(n)
	conns := w.Conns()
	outs := make([][][]byte, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		outs[r] = make([][]byte, n)
		for j := range n {
			outs[r][j] = make([]byte, len(shards[j]))
		}
		in := append([]byte{}, shards[r]...)
		outs[r][r] = in // in place, as all_gather_into_tensor's own shard may be
		wg.Go(func() {
			errs[r] = AllGather(ctx, conns[r], collective.Args{DType: dt, In: [][]byte{in}, Out: outs[r]}, coding(quant.Int8), hosts)
		})
	}
	wg.Wait()
	conntest.MustOK(t, w, errs)
	return outs
}

// Every rank gets the same bytes, its own shard included, within the
// int8 bound of each shard's fp64 values; NaN and Inf arrive exact. With
// small pieces the shards travel in several (uneven across ranks), and the
// bytes are those of one piece per shard.
func TestAllGatherIdenticalEverywhere(t *testing.T) {
	for _, small := range []bool{false, true} {
		t.Run(fmt.Sprintf("small_pieces=%v", small), func(t *testing.T) {
			if small {
				defer func(old int) { pieceElems = old }(pieceElems)
				pieceElems = Unit
			}
			testAllGather(t)
		})
	}
}

func testAllGather(t *testing.T) {
	for _, lay := range layouts {
		n := lay.n
		for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16} {
			for _, nonFinite := range []bool{false, true} {
				name := fmt.Sprintf("%s/%v/nonfinite=%v", layoutName(n, lay.hosts), dt, nonFinite)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(dt)))
				es := dt.Size()
				shards := make([][]byte, n)
				vals := make([][]float64, n)
				for r := range n {
					numel := 3*Unit + 17*r // uneven, with tails
					xs := make([]float32, numel)
					for i := range xs {
						xs[i] = float32(rng.NormFloat64() * 0.05)
					}
					if nonFinite && r == n-1 {
						xs[5] = float32(math.NaN())
						xs[Unit+7] = float32(math.NaN()) // a middle piece
						xs[numel-1] = float32(math.Inf(1))
					}
					shards[r] = make([]byte, numel*es)
					putFloats(dt, shards[r], xs)
					vals[r] = getFloats(dt, shards[r])
				}
				outs := gather(t, shards, dt, lay.hosts)
				for j := range n { // as one message of the whole shard
					main := make([]byte, quant.MainLen(quant.Int8, len(shards[j])/es, BlockOf(quant.Int8)))
					exact, err := quant.Encode(main, nil, shards[j], dt, quant.Int8, BlockOf(quant.Int8))
					require.NoError(t, err)
					whole := make([]byte, len(shards[j]))
					require.NoError(t, quant.Decode(whole, main, exact, dt))
					require.Equal(t, whole, outs[0][j], "%s: shard %d as one message", name, j)
				}
				for r := 1; r < n; r++ {
					for j := range n {
						require.Equal(t, outs[0][j], outs[r][j], "%s: rank %d's copy of shard %d", name, r, j)
					}
				}
				for j := range n {
					got := getFloats(dt, outs[0][j])
					B := BlockOf(quant.Int8)
					for b := 0; b < len(got); b += B {
						hi := min(len(got), b+B)
						absmax, finite := 0.0, true
						for _, v := range vals[j][b:hi] {
							finite = finite && !math.IsNaN(v) && !math.IsInf(v, 0)
							absmax = max(absmax, math.Abs(v))
						}
						for i := b; i < hi; i++ {
							if !finite {
								require.Equal(t, math.Float64bits(vals[j][i]), math.Float64bits(got[i]), "%s: shard %d element %d exact", name, j, i)
								continue
							}
							bound := 0.5*absmax/127*(1+1e-4) + math.Abs(got[i])*ulpRel(dt)/2
							require.LessOrEqualf(t, math.Abs(got[i]-vals[j][i]), bound, "%s: shard %d element %d", name, j, i)
						}
					}
				}
			}
		}
	}
}

func ulpRel(dt dtype.DType) float64 {
	switch dt {
	case dtype.BFloat16:
		return 1.0 / 128
	case dtype.Float16:
		return 1.0 / 1024
	}
	return 1.0 / (1 << 23)
}

func putFloats(dt dtype.DType, b []byte, xs []float32) {
	if dt != dtype.Float32 {
		reduce.Narrow(dt, b, xs)
		return
	}
	for i, v := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
}

func getFloats(dt dtype.DType, b []byte) []float64 {
	xs := make([]float32, len(b)/dt.Size())
	if dt != dtype.Float32 {
		reduce.Widen(dt, xs, b)
	} else {
		for i := range xs {
			xs[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	out := make([]float64, len(xs))
	for i, v := range xs {
		out[i] = float64(v)
	}
	return out
}

// coding is mode with its default block.
func coding(m quant.Mode) Coding { return Coding{m, BlockOf(m)} }

// TACO's two-shot on 8 ranks: within 0.045 of the float64 sum (relative
// L2), bitwise identical on every rank, n(1 + 8/B) bytes per element sent
// plus a header per message, and NaN and Inf reach every rank's output.
func TestFP8AllReduce8Ranks(t *testing.T) {
	const n, numel = 8, 8 * Unit * 3
	for _, block := range []int{32, 256, 1024} {
		code := Coding{quant.FP8, block}
		rng := rand.New(rand.NewPCG(8, uint64(block)))
		vals := make([][]float32, n)
		for r := range vals {
			vals[r] = make([]float32, numel)
			for i := range vals[r] {
				vals[r][i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
		}
		const nanAt, infAt = 1234, 40000
		vals[2][nanAt] = float32(math.NaN())
		vals[5][infAt] = float32(math.Inf(1))
		outs := make([][]byte, n)
		w := conntest.NewWorld(n)
		conns := w.Conns()
		errs := make([]error, n)
		var wg sync.WaitGroup
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for r := range n {
			outs[r] = bufs32(vals[r])
			wg.Go(func() {
				errs[r] = AllReduce(ctx, conns[r], collective.Args{DType: dtype.Float32, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}}, code, nil, 1)
			})
		}
		wg.Wait()
		cancel()
		conntest.MustOK(t, w, errs)
		for r := 1; r < n; r++ {
			require.Equal(t, outs[0], outs[r], "B %d: rank %d", block, r)
		}
		var num, den float64
		for i := range numel {
			got := float64(math.Float32frombits(binary.LittleEndian.Uint32(outs[0][4*i:])))
			switch i {
			case nanAt:
				require.True(t, math.IsNaN(got), "B %d: NaN reaches the output", block)
				continue
			case infAt:
				require.True(t, math.IsInf(got, 1), "B %d: Inf reaches the output", block)
				continue
			}
			want := 0.0
			for r := range n {
				want += float64(vals[r][i])
			}
			num, den = num+(got-want)*(got-want), den+want*want
		}
		rel := math.Sqrt(num / den)
		t.Logf("B %d: relative L2 error %.4f against the float64 sum", block, rel)
		require.LessOrEqual(t, rel, 0.045, "B %d", block)
		require.Greater(t, rel, 0.005, "B %d: coded twice", block)
		// both phases send every shard (one piece each) to the n-1 other
		// ranks: n(1 + 8/B) bytes and a header per message. The blocks
		// holding the NaN and the Inf also travel exact (4 bytes an
		// element): from their rank to the owner, then from the owner to
		// the 7 others, 16 blocks in all.
		coded := int64(2 * (n - 1) * numel * (block + 8) / block)
		headers := int64(quant.HeaderLen * 2 * n * (n - 1))
		exact := int64(16 * 4 * block)
		require.Equal(t, coded+headers+exact, w.TotalSent(), "B %d: wire bytes", block)
	}
}

func bufs32(xs []float32) []byte {
	b := make([]byte, 4*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}
