package lossy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/quant"
)

// layouts are the group layouts the reductions are tested on: one hop
// (nil) at 2, 3 and 4 ranks, and hosts of several ranks.
var layouts = []struct {
	n     int
	hosts [][]int
}{
	{2, nil}, {3, nil}, {4, nil},
	{4, [][]int{{0, 1}, {2, 3}}},
	{6, [][]int{{0, 2, 4}, {1, 3, 5}}},   // ranks not in host order
	{6, [][]int{{0, 1}, {2, 3}, {4, 5}}}, // three hosts
}

func layoutName(n int, hosts [][]int) string {
	if hosts == nil {
		return fmt.Sprintf("n%d", n)
	}
	return fmt.Sprintf("%dx%d", len(hosts), len(hosts[0]))
}

// world runs f on every rank of an in-memory world of n ranks.
func world(t testing.TB, n int, f func(ctx context.Context, c collective.VarConn) error) {
	t.Helper()
	w := conntest.NewWorld(n)
	conns := w.Conns()
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(ctx, conns[r]) })
	}
	wg.Wait()
	conntest.MustOK(t, w, errs)
}

// randomShards makes every rank's contribution to every shard (numel
// elements), with a NaN and an infinity in some when nonFinite.
func randomShards(rng *rand.Rand, n, numel int, dt dtype.DType, nonFinite bool) [][][]byte {
	ins := make([][][]byte, n)
	for r := range n {
		ins[r] = make([][]byte, n)
		for j := range n {
			xs := make([]float32, numel)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
			if nonFinite && r == 1 && j == 0 && numel > Unit+3 {
				xs[Unit+3] = float32(math.NaN())
			}
			if nonFinite && r == 0 && j == n-1 {
				xs[numel-1] = float32(math.Inf(1))
			}
			ins[r][j] = make([]byte, numel*dt.Size())
			putFloats(dt, ins[r][j], xs)
		}
	}
	return ins
}

// expectOwner is what toOwners leaves on the owner of shard j, built here
// from quant's Encode and Accumulate step by step as the package
// documentation orders them: host sums in local order, one coding of each
// host's sum (of each rank's contribution, one hop), the owner's own exact,
// in rail order.
func expectOwner(t *testing.T, ins [][][]byte, j int, dt dtype.DType, mode quant.Mode, hosts [][]int) []float32 {
	n := len(ins)
	numel := len(ins[0][j]) / dt.Size()
	if hosts == nil {
		hosts = make([][]int, n)
		for r := range n {
			hosts[r] = []int{r}
		}
	}
	var ownerHost, local int
	for h, ranks := range hosts {
		for l, r := range ranks {
			if r == j {
				ownerHost, local = h, l
			}
		}
	}
	_ = local
	acc := make([]float32, numel)
	for h, ranks := range hosts {
		part, partDT := ins[ranks[0]][j], dt
		if len(ranks) > 1 {
			sum := make([]float32, numel)
			for l, r := range ranks {
				addExact(dt, sum, ins[r][j], l == 0)
			}
			part, partDT = bufs.Float32Bytes(sum), dtype.Float32
		}
		if h == ownerHost {
			addExact(partDT, acc, part, h == 0)
			continue
		}
		main := make([]byte, quant.MainLen(mode, numel, BlockOf(mode)))
		exact, err := quant.Encode(main, nil, part, partDT, mode, BlockOf(mode))
		require.NoError(t, err)
		require.NoError(t, quant.Accumulate(acc, main, exact, h == 0))
	}
	return acc
}

// boundOwner is the error bound of shard j's sum against the float64 sum,
// per element: s/2 for each coded contribution's block (s from that
// contribution's absmax; a block holding NaN or Inf travels exact), plus
// float32 rounding of the running sums and the final rounding to dt.
func boundOwner(vals [][][]float64, j int, dt dtype.DType, mode quant.Mode, hosts [][]int, got []float64) []float64 {
	n := len(vals)
	q := 127.0
	if mode == quant.Int4 {
		q = 7
	}
	if hosts == nil {
		hosts = make([][]int, n)
		for r := range n {
			hosts[r] = []int{r}
		}
	}
	numel := len(got)
	out := make([]float64, numel)
	B := BlockOf(mode)
	for b := 0; b < numel; b += B {
		hi := min(numel, b+B)
		for _, ranks := range hosts {
			owner := false
			sums := make([]float64, hi-b)
			for _, r := range ranks {
				owner = owner || r == j
				for k := b; k < hi; k++ {
					sums[k-b] += vals[r][j][k]
					out[k] += math.Abs(vals[r][j][k]) * float64(n+2) / (1 << 24)
				}
			}
			absmax := 0.0
			for _, v := range sums {
				absmax = max(absmax, math.Abs(v))
			}
			if math.IsNaN(absmax) || math.IsInf(absmax, 0) {
				absmax = 0
			}
			for k := b; k < hi; k++ {
				if !owner {
					out[k] += 0.5 * absmax / q * (1 + 1e-4)
				}
				out[k] += absmax * float64(n+2) / (1 << 24)
			}
		}
	}
	for k, g := range got {
		out[k] += math.Abs(g) * ulpRel(dt) / 2
	}
	return out
}

func TestReduceScatter(t *testing.T) {
	defer func(old int) { pieceElems = old }(pieceElems)
	pieceElems = Unit // several pieces, as a large tensor has
	for _, mode := range []quant.Mode{quant.Int8, quant.Int4, quant.FP8} {
		for _, lay := range layouts {
			for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16} {
				for _, numel := range []int{1, 2*Unit + 1001} {
					name := fmt.Sprintf("%v/%s/%v/numel%d", mode, layoutName(lay.n, lay.hosts), dt, numel)
					rng := rand.New(rand.NewPCG(uint64(lay.n), uint64(numel)))
					n, es := lay.n, dt.Size()
					ins := randomShards(rng, n, numel, dt, numel > 1)
					vals := make([][][]float64, n)
					for r := range n {
						for j := range n {
							vals[r] = append(vals[r], getFloats(dt, ins[r][j]))
						}
					}
					outs := make([][]byte, n)
					world(t, n, func(ctx context.Context, c collective.VarConn) error {
						r := c.Rank()
						in := make([][]byte, n) // a copy, the output in place on its own shard
						for j := range in {
							in[j] = append([]byte{}, ins[r][j]...)
						}
						outs[r] = in[r]
						return ReduceScatter(ctx, c, collective.Args{DType: dt, In: in, Out: [][]byte{outs[r]}}, coding(mode), lay.hosts, 1)
					})
					for j := range n {
						want := make([]byte, numel*es)
						finish(dt, want, expectOwner(t, ins, j, dt, mode, lay.hosts), 1)
						require.Equal(t, want, outs[j], "%s: shard %d", name, j)
						got := getFloats(dt, outs[j])
						if mode == quant.FP8 { // no per-element bound: TACO's error is an L2 one
							requireRelL2(t, got, func(i int) float64 {
								ref := 0.0
								for r := range n {
									ref += vals[r][j][i]
								}
								return ref
							}, 0.03, name)
							continue
						}
						bound := boundOwner(vals, j, dt, mode, lay.hosts, got)
						for i, g := range got {
							ref := 0.0
							for r := range n {
								ref += vals[r][j][i]
							}
							if math.IsNaN(ref) || math.IsInf(ref, 0) {
								require.Equal(t, math.IsNaN(ref), math.IsNaN(g), "%s: shard %d element %d: %v", name, j, i, g)
								require.Equal(t, math.IsInf(ref, 1), math.IsInf(g, 1), "%s: shard %d element %d: %v", name, j, i, g)
								continue
							}
							require.LessOrEqualf(t, math.Abs(g-ref), bound[i], "%s: shard %d element %d", name, j, i)
						}
					}
				}
			}
		}
	}
}

// The two-shot all_reduce: every rank's output is the same bytes, those of
// each owner's sum coded once more and decoded, within the bound of the
// two quantizations; AVG divides before the second.
func TestAllReduce(t *testing.T) {
	defer func(old int) { pieceElems = old }(pieceElems)
	pieceElems = Unit
	for _, mode := range []quant.Mode{quant.Int8, quant.Int4, quant.FP8} {
		for _, lay := range layouts {
			for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16} {
				for _, numel := range []int{7, 5*Unit + 3} {
					avg := 1 + numel%2*(lay.n-1) // odd counts average
					name := fmt.Sprintf("%v/%s/%v/numel%d/avg%d", mode, layoutName(lay.n, lay.hosts), dt, numel, avg)
					rng := rand.New(rand.NewPCG(uint64(lay.n), uint64(numel)))
					n, es := lay.n, dt.Size()
					whole := randomShards(rng, n, numel, dt, true) // rank r's tensor: whole[r][0]
					outs := make([][]byte, n)
					world(t, n, func(ctx context.Context, c collective.VarConn) error {
						r := c.Rank()
						outs[r] = append([]byte{}, whole[r][0]...) // in place
						return AllReduce(ctx, c, collective.Args{DType: dt, In: [][]byte{outs[r]}, Out: [][]byte{outs[r]}}, coding(mode), lay.hosts, avg)
					})
					for r := 1; r < n; r++ {
						require.Equal(t, outs[0], outs[r], "%s: rank %d", name, r)
					}
					// the shards: whole blocks, split as AllReduce documents
					nb := quant.Blocks(numel, Unit)
					ins := make([][][]byte, n)
					for j := range n {
						lo, hi := min(numel, nb*j/n*Unit), min(numel, nb*(j+1)/n*Unit)
						for r := range n {
							ins[r] = append(ins[r], whole[r][0][lo*es:hi*es])
						}
					}
					for j := range n {
						acc := expectOwner(t, ins, j, dt, mode, lay.hosts)
						divide(acc, avg)
						main := make([]byte, quant.MainLen(mode, len(acc), BlockOf(mode)))
						exact, err := quant.EncodeFloat32(main, nil, acc, mode, BlockOf(mode))
						require.NoError(t, err)
						want := make([]byte, len(acc)*es)
						require.NoError(t, quant.Decode(want, main, exact, dt))
						lo := nb * j / n * Unit
						require.Equal(t, want, outs[0][min(numel, lo)*es:min(numel, lo)*es+len(want)], "%s: shard %d", name, j)
					}
					// against float64: the reduction's bound, plus the second coding
					got := getFloats(dt, outs[0])
					if mode == quant.FP8 {
						requireRelL2(t, got, func(i int) float64 {
							ref := 0.0
							for r := range n {
								ref += getFloats(dt, whole[r][0][i*es:(i+1)*es])[0]
							}
							return ref / float64(avg)
						}, 0.045, name)
						continue
					}
					for j := range n {
						lo, hi := min(numel, nb*j/n*Unit), min(numel, nb*(j+1)/n*Unit)
						vals := make([][][]float64, n)
						for r := range n {
							vals[r] = make([][]float64, n)
							vals[r][j] = getFloats(dt, ins[r][j])
						}
						first := boundOwner(vals, j, dt, mode, lay.hosts, got[lo:hi])
						q := map[quant.Mode]float64{quant.Int8: 127, quant.Int4: 7}[mode]
						B := BlockOf(mode)
						for b := lo; b < hi; b += B {
							bhi := min(hi, b+B)
							absmax, most := 0.0, 0.0 // of the sum, and of its first bound
							for i := b; i < bhi; i++ {
								ref := 0.0
								for r := range n {
									ref += vals[r][j][i-lo]
								}
								absmax = max(absmax, math.Abs(ref)/float64(avg))
								most = max(most, first[i-lo]/float64(avg))
							}
							for i := b; i < bhi; i++ {
								ref := 0.0
								for r := range n {
									ref += vals[r][j][i-lo]
								}
								ref /= float64(avg)
								if math.IsNaN(absmax) || math.IsInf(absmax, 0) {
									require.Equal(t, math.IsNaN(ref), math.IsNaN(got[i]), "%s: element %d", name, i)
									continue
								}
								bound := first[i-lo]/float64(avg) + 0.5*(absmax+most)/q*(1+1e-4) + math.Abs(got[i])*ulpRel(dt)
								require.LessOrEqualf(t, math.Abs(got[i]-ref), bound, "%s: element %d", name, i)
							}
						}
					}
				}
			}
		}
	}
}

// requireRelL2 checks ||got - ref|| / ||ref|| <= bound over the elements
// whose reference is finite (the others, NaN and Inf, must match it).
func requireRelL2(t *testing.T, got []float64, ref func(i int) float64, bound float64, name string) {
	t.Helper()
	var num, den float64
	for i, g := range got {
		r := ref(i)
		if math.IsNaN(r) || math.IsInf(r, 0) {
			require.Equal(t, math.IsNaN(r), math.IsNaN(g), "%s: element %d: %v", name, i, g)
			require.Equal(t, math.IsInf(r, 1), math.IsInf(g, 1), "%s: element %d: %v", name, i, g)
			continue
		}
		num, den = num+(g-r)*(g-r), den+r*r
	}
	if den > 0 {
		require.LessOrEqual(t, math.Sqrt(num/den), bound, name)
	}
}
