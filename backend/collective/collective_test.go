package collective

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
)

func TestAllReduce(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, n := range worlds {
				for _, red := range reductions {
					for _, numel := range elemCounts {
						name := fmt.Sprintf("n%d/%v/op%d/%d", n, red.dt, red.op, numel)
						rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
						xs := make([][]byte, n)
						bufs := make([][]byte, n)
						args := make([]Args, n)
						pool := NewPool()
						for r := range n {
							xs[r] = randData(rng, red.dt, numel)
							bufs[r] = clone(xs[r])
							args[r] = Args{DType: red.dt, Op: red.op, In: [][]byte{bufs[r]}, Out: [][]byte{bufs[r]}, Pool: pool}
						}
						w := conntest.NewWorld(n)
						mustOK(t, w, runOp(t, w, AllReduce, args))
						want := refAllReduce(red.dt, red.op, xs, direct)
						for r := range n {
							sameBytes(t, fmt.Sprintf("%s rank %d", name, r), bufs[r], want)
						}
					}
				}
			}
		})
	}
}

// Out[0] distinct from In[0]: In is copied and must stay intact.
func TestAllReduceNotInPlace(t *testing.T) {
	for _, direct := range []bool{true, false} {
		setTuning(t, direct)
		n, numel := 4, 1001
		rng := rand.New(rand.NewPCG(1, 2))
		xs := make([][]byte, n)
		outs := make([][]byte, n)
		args := make([]Args, n)
		for r := range n {
			xs[r] = randData(rng, dtype.Float32, numel)
			outs[r] = make([]byte, len(xs[r]))
			args[r] = Args{DType: dtype.Float32, In: [][]byte{clone(xs[r])}, Out: [][]byte{outs[r]}}
		}
		w := conntest.NewWorld(n)
		mustOK(t, w, runOp(t, w, AllReduce, args))
		want := refAllReduce(dtype.Float32, 0, xs, direct)
		for r := range n {
			sameBytes(t, "out", outs[r], want)
			sameBytes(t, "in untouched", args[r].In[0], xs[r])
		}
	}
}

// With the default knobs (real segment sizes) a multi-megabyte ring still
// matches the reference.
func TestAllReduceDefaultTuning(t *testing.T) {
	n, numel := 3, 3<<18+5 // 3 MiB of float32, not divisible by 3 blocks evenly
	rng := rand.New(rand.NewPCG(3, 3))
	xs := make([][]byte, n)
	args := make([]Args, n)
	pool := NewPool()
	for r := range n {
		xs[r] = randData(rng, dtype.Float32, numel)
		b := clone(xs[r])
		args[r] = Args{DType: dtype.Float32, In: [][]byte{b}, Out: [][]byte{b}, Pool: pool}
	}
	w := conntest.NewWorld(n)
	mustOK(t, w, runOp(t, w, AllReduce, args))
	want := refAllReduce(dtype.Float32, 0, xs, false)
	for r := range n {
		sameBytes(t, "out", args[r].Out[0], want)
	}
}

func TestReduceScatter(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, n := range worlds {
				for _, red := range reductions {
					// Every block is numel elements here, so 1001 is already
					// many segments per block.
					for _, numel := range elemCounts[:len(elemCounts)-1] {
						for _, inPlace := range []bool{false, true} {
							if inPlace && red != reductions[0] {
								continue // aliasing is dtype-independent
							}
							name := fmt.Sprintf("n%d/%v/op%d/%d/inplace=%v", n, red.dt, red.op, numel, inPlace)
							rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
							// ins[r][j]: rank r's contribution to block j.
							ins := make([][][]byte, n)
							args := make([]Args, n)
							for r := range n {
								ins[r] = make([][]byte, n)
								in := make([][]byte, n)
								for j := range n {
									ins[r][j] = randData(rng, red.dt, numel)
									in[j] = clone(ins[r][j])
								}
								out := make([]byte, len(in[r]))
								if inPlace {
									out = in[r]
								}
								args[r] = Args{DType: red.dt, Op: red.op, In: in, Out: [][]byte{out}}
							}
							w := conntest.NewWorld(n)
							mustOK(t, w, runOp(t, w, ReduceScatter, args))
							for r := range n {
								parts := make([][]byte, n)
								for p := range n {
									parts[p] = ins[p][r]
								}
								start := r + 1
								if direct {
									start = 0
								}
								sameBytes(t, name+" out", args[r].Out[0], refChain(red.dt, red.op, parts, start))
								for j := range n {
									if inPlace && j == r {
										continue
									}
									sameBytes(t, name+" In untouched", args[r].In[j], ins[r][j])
								}
							}
						}
					}
				}
			}
		})
	}
}

func TestReduce(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, n := range worlds {
				for _, red := range reductions[:5] {
					for _, numel := range elemCounts {
						for _, root := range roots(n) {
							for _, inPlace := range []bool{false, true} {
								if inPlace && red != reductions[0] {
									continue
								}
								name := fmt.Sprintf("n%d/%v/op%d/%d/root%d/inplace=%v", n, red.dt, red.op, numel, root, inPlace)
								rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
								xs := make([][]byte, n)
								args := make([]Args, n)
								sentinel := make([]byte, numel*red.dt.Size())
								for i := range sentinel {
									sentinel[i] = 0xA5
								}
								for r := range n {
									xs[r] = randData(rng, red.dt, numel)
									in := clone(xs[r])
									out := clone(sentinel)
									if inPlace && r == root {
										out = in
									}
									args[r] = Args{DType: red.dt, Op: red.op, Root: root, In: [][]byte{in}, Out: [][]byte{out}}
								}
								w := conntest.NewWorld(n)
								mustOK(t, w, runOp(t, w, Reduce, args))
								want := refAllReduce(red.dt, red.op, xs, direct)
								for r := range n {
									if r == root {
										sameBytes(t, name+" root out", args[r].Out[0], want)
										if inPlace {
											continue
										}
									} else {
										sameBytes(t, name+" non-root out untouched", args[r].Out[0], sentinel)
									}
									sameBytes(t, name+" In untouched", args[r].In[0], xs[r])
								}
							}
						}
					}
				}
			}
		})
	}
}

// Non-roots may pass no Out at all.
func TestReduceNilOut(t *testing.T) {
	for _, direct := range []bool{true, false} {
		setTuning(t, direct)
		n, root := 3, 1
		rng := rand.New(rand.NewPCG(4, 4))
		xs := make([][]byte, n)
		args := make([]Args, n)
		for r := range n {
			xs[r] = randData(rng, dtype.Float32, 333)
			args[r] = Args{DType: dtype.Float32, Root: root, In: [][]byte{clone(xs[r])}}
		}
		args[root].Out = [][]byte{make([]byte, len(xs[0]))}
		w := conntest.NewWorld(n)
		mustOK(t, w, runOp(t, w, Reduce, args))
		sameBytes(t, "root out", args[root].Out[0], refAllReduce(dtype.Float32, 0, xs, direct))
	}
}

// roots returns the distinct roots worth testing in a group of n: first,
// last and middle.
func roots(n int) []int {
	rs := []int{0}
	if n > 1 {
		rs = append(rs, n-1)
	}
	if n > 2 {
		rs = append(rs, n/2)
	}
	return rs
}

// shardLens returns per-rank shard lengths in bytes: equal, or uneven with
// some empty shards.
func shardLens(n, numel, es int, uneven bool) []int {
	lens := make([]int, n)
	for r := range lens {
		lens[r] = numel * es
		if uneven {
			lens[r] = ((numel*(r+1)*7)%(numel+3) - 1) * es
			if r%3 == 1 || lens[r] < 0 {
				lens[r] = 0
			}
		}
	}
	return lens
}

func TestAllGather(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(algoName(direct), func(t *testing.T) {
			setTuning(t, direct)
			for _, n := range worlds {
				for _, dt := range []dtype.DType{dtype.Float32, dtype.UInt8} {
					for _, numel := range elemCounts {
						for _, uneven := range []bool{false, true} {
							for _, alias := range []bool{false, true} {
								if alias && uneven {
									continue
								}
								name := fmt.Sprintf("n%d/%v/%d/uneven=%v/alias=%v", n, dt, numel, uneven, alias)
								rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
								lens := shardLens(n, numel, dt.Size(), uneven)
								shards := make([][]byte, n)
								args := make([]Args, n)
								for r := range n {
									shards[r] = randData(rng, dtype.UInt8, lens[r])
								}
								for r := range n {
									out := make([][]byte, n)
									for j := range n {
										out[j] = make([]byte, lens[j])
									}
									in := clone(shards[r])
									if alias {
										out[r] = in
									}
									args[r] = Args{DType: dt, In: [][]byte{in}, Out: out}
								}
								w := conntest.NewWorld(n)
								mustOK(t, w, runOp(t, w, AllGather, args))
								for r := range n {
									sameBytes(t, name+" In untouched", args[r].In[0], shards[r])
									for j := range n {
										sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", name, r, j), args[r].Out[j], shards[j])
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

func TestBroadcast(t *testing.T) {
	for _, algo := range []string{"direct", "chain", "tree"} {
		t.Run(algo, func(t *testing.T) {
			setTuning(t, algo == "direct")
			for _, n := range worlds {
				for _, numel := range elemCounts {
					for _, root := range roots(n) {
						for _, inPlace := range []bool{true, false} {
							name := fmt.Sprintf("n%d/%d/root%d/inplace=%v", n, numel, root, inPlace)
							rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
							src := randData(rng, dtype.BFloat16, numel)
							args := make([]Args, n)
							for r := range n {
								buf := randData(rng, dtype.BFloat16, numel)
								in := buf
								if r == root {
									in = clone(src)
									if inPlace {
										buf = in
									}
								}
								args[r] = Args{DType: dtype.BFloat16, Root: root, In: [][]byte{in}, Out: [][]byte{buf}, Local: algo == "tree"}
							}
							w := conntest.NewWorld(n)
							mustOK(t, w, runOp(t, w, Broadcast, args))
							for r := range n {
								sameBytes(t, fmt.Sprintf("%s rank %d", name, r), args[r].Out[0], src)
							}
							sameBytes(t, name+" root In untouched", args[root].In[0], src)
						}
					}
				}
			}
		})
	}
}

func TestGatherScatter(t *testing.T) {
	for _, n := range worlds {
		for _, numel := range elemCounts {
			for _, uneven := range []bool{false, true} {
				for _, root := range []int{0, n - 1} {
					name := fmt.Sprintf("n%d/%d/uneven=%v/root%d", n, numel, uneven, root)
					rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
					lens := shardLens(n, numel, 4, uneven)
					shards := make([][]byte, n)
					for r := range n {
						shards[r] = randData(rng, dtype.Int32, lens[r]/4)
					}

					// Gather.
					args := make([]Args, n)
					for r := range n {
						args[r] = Args{DType: dtype.Int32, Root: root, In: [][]byte{clone(shards[r])}}
						if r == root {
							args[r].Out = make([][]byte, n)
							for j := range n {
								args[r].Out[j] = make([]byte, lens[j])
							}
						}
					}
					w := conntest.NewWorld(n)
					mustOK(t, w, runOp(t, w, Gather, args))
					for j := range n {
						sameBytes(t, name+" gather", args[root].Out[j], shards[j])
					}
					for r := range n {
						sameBytes(t, name+" gather In untouched", args[r].In[0], shards[r])
					}

					// Scatter.
					for r := range n {
						args[r] = Args{DType: dtype.Int32, Root: root, Out: [][]byte{make([]byte, lens[r])}}
						if r == root {
							args[r].In = make([][]byte, n)
							for j := range n {
								args[r].In[j] = clone(shards[j])
							}
						}
					}
					w = conntest.NewWorld(n)
					mustOK(t, w, runOp(t, w, Scatter, args))
					for r := range n {
						sameBytes(t, name+" scatter", args[r].Out[0], shards[r])
					}
					for j := range n {
						sameBytes(t, name+" scatter In untouched", args[root].In[j], shards[j])
					}
				}
			}
		}
	}
}

func TestAllToAll(t *testing.T) {
	for _, n := range worlds {
		for _, numel := range elemCounts {
			for _, uneven := range []bool{false, true} {
				name := fmt.Sprintf("n%d/%d/uneven=%v", n, numel, uneven)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(numel)))
				// blk[i][j]: what rank i sends to rank j.
				blk := make([][][]byte, n)
				for i := range n {
					blk[i] = make([][]byte, n)
					for j := range n {
						l := numel
						if uneven {
							l = (numel*(i+2*j+1) + i) % (numel + 2)
							if (i+j)%3 == 0 {
								l = 0
							}
						}
						blk[i][j] = randData(rng, dtype.Float64, l)
					}
				}
				args := make([]Args, n)
				for i := range n {
					args[i] = Args{DType: dtype.Float64, In: make([][]byte, n), Out: make([][]byte, n)}
					for j := range n {
						args[i].In[j] = clone(blk[i][j])
						args[i].Out[j] = make([]byte, len(blk[j][i]))
					}
				}
				w := conntest.NewWorld(n)
				mustOK(t, w, runOp(t, w, AllToAll, args))
				for i := range n {
					for j := range n {
						sameBytes(t, fmt.Sprintf("%s rank %d Out[%d]", name, i, j), args[i].Out[j], blk[j][i])
						sameBytes(t, name+" In untouched", args[i].In[j], blk[i][j])
					}
				}
			}
		}
	}
}
