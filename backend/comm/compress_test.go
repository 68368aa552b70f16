package comm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/switcher"
)

// newRigOpts is newRig with per-rank group options.
func newRigOpts(t *testing.T, n int, opts func(rank int) map[string]string) *rig {
	return newRigWith(t, n, "z", 30*time.Second, opts)
}

func gaussBF16(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(float32(rng.NormFloat64()*0.02)))
	}
	return b
}

func opStats(t *testing.T, c *Comm) map[string]OpStats {
	js, err := c.Stats()
	require.NoError(t, err)
	var s struct {
		Ops map[string]OpStats `json:"ops"`
	}
	require.NoError(t, json.Unmarshal(js, &s))
	return s.Ops
}

// Coded and uncoded runs of the same collectives give identical bits, and
// the coded run sends fewer bytes.
func TestCodedCollectivesMatchUncoded(t *testing.T) {
	const n = 3
	const numel = 1 << 20 // 2 MiB of bf16: above the two-shot size
	results := map[string][][]byte{}
	wire := map[string]int64{}
	byOp := map[string]map[string]OpStats{}
	var r0 *Comm // rank 0 of the coded run
	for _, mode := range []string{"never", "always"} {
		r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": mode} })
		var outs [][]byte
		// all_reduce (sum, two-shot), all_gather, reduce_scatter, all_to_all,
		// broadcast
		bufs := make([][]byte, n)
		for _, x := range r.everyRank(func(rank int) *Op {
			bufs[rank] = gaussBF16(uint64(rank), numel)
			return &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
		}) {
			require.NoError(t, x.err)
		}
		outs = append(outs, bufs...)
		ag := make([][][]byte, n)
		for _, x := range r.everyRank(func(rank int) *Op {
			ag[rank] = [][]byte{make([]byte, 2*numel), make([]byte, 2*numel), make([]byte, 2*numel)}
			return &Op{Kind: opkind.AllGather, DType: dtype.BFloat16, In: [][]byte{gaussBF16(uint64(10+rank), numel)}, Out: ag[rank]}
		}) {
			require.NoError(t, x.err)
		}
		for rank := 0; rank < n; rank++ {
			for j := 0; j < n; j++ {
				require.Equal(t, gaussBF16(uint64(10+j), numel), ag[rank][j], "%s all_gather rank %d slot %d", mode, rank, j)
			}
		}
		rs := make([][]byte, n)
		for _, x := range r.everyRank(func(rank int) *Op {
			rs[rank] = make([]byte, 2*numel)
			in := [][]byte{gaussBF16(uint64(20+rank), numel), gaussBF16(uint64(30+rank), numel), gaussBF16(uint64(40+rank), numel)}
			return &Op{Kind: opkind.ReduceScatter, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: in, Out: [][]byte{rs[rank]}}
		}) {
			require.NoError(t, x.err)
		}
		outs = append(outs, rs...)
		a2a := make([][][]byte, n)
		for _, x := range r.everyRank(func(rank int) *Op {
			op := &Op{Kind: opkind.AllToAll, DType: dtype.BFloat16}
			for j := range n {
				op.In = append(op.In, gaussBF16(uint64(100*rank+j), numel))
				op.Out = append(op.Out, make([]byte, 2*numel))
			}
			a2a[rank] = op.Out
			return op
		}) {
			require.NoError(t, x.err)
		}
		for rank := range n {
			for j := range n {
				require.Equal(t, gaussBF16(uint64(100*j+rank), numel), a2a[rank][j], "%s all_to_all rank %d from %d", mode, rank, j)
			}
		}
		bc := make([][]byte, n)
		for _, x := range r.everyRank(func(rank int) *Op {
			bc[rank] = make([]byte, 2*numel)
			if rank == 1 {
				copy(bc[rank], gaussBF16(99, numel))
			}
			return &Op{Kind: opkind.Broadcast, DType: dtype.BFloat16, Root: 1, In: [][]byte{bc[rank]}, Out: [][]byte{bc[rank]}}
		}) {
			require.NoError(t, x.err)
		}
		for rank := 0; rank < n; rank++ {
			require.Equal(t, gaussBF16(99, numel), bc[rank], "%s broadcast rank %d", mode, rank)
		}
		// point to point: rank 0 -> rank 2
		dst := make([]byte, 2*numel)
		rc := r.submit(2, &Op{Kind: opkind.Recv, DType: dtype.BFloat16, Root: 0, Tag: 4, Out: [][]byte{dst}})
		require.NoError(t, wait(t, r.submit(0, &Op{Kind: opkind.Send, DType: dtype.BFloat16, Root: 2, Tag: 4, In: [][]byte{gaussBF16(5, numel)}})).err)
		require.NoError(t, wait(t, rc).err)
		require.Equal(t, gaussBF16(5, numel), dst, "%s send/recv", mode)

		results[mode] = outs
		byOp[mode] = map[string]OpStats{}
		for _, c := range r.comms { // summed over ranks: some send nothing
			for name, s := range opStats(t, c) {
				a := byOp[mode][name]
				a.WireBytes += s.WireBytes
				a.UncodedBytes += s.UncodedBytes
				a.Ratio = float64(a.UncodedBytes) / float64(a.WireBytes)
				byOp[mode][name] = a
			}
		}
		for _, s := range opStats(t, r.comms[0]) {
			wire[mode] += s.WireBytes
		}
		if mode == "always" {
			r0 = r.comms[0]
			st := opStats(t, r.comms[0])
			require.NotZero(t, st["all_gather"].Choices["zip3"], "%v", st["all_gather"].Choices)
			require.NotZero(t, st["send"].Choices["zip3"], "%v", st["send"].Choices)
			require.Greater(t, st["all_gather"].CodecSeconds, 0.0)
		}
	}
	for i := range results["never"] {
		require.Equal(t, results["never"][i], results["always"][i], "reduction output %d differs between coded and uncoded", i)
	}
	// Both modes run the same algorithms, so what the coded run's sends stand
	// for uncoded is exactly what the uncoded run sent, op by op.
	st := opStats(t, r0)
	require.InDelta(t, float64(st["all_gather"].UncodedBytes)/float64(st["all_gather"].WireBytes), st["all_gather"].Ratio, 1e-12)
	for name, never := range byOp["never"] {
		coded := byOp["always"][name]
		if name == "recv" { // receivers send nothing
			require.Zero(t, never.WireBytes+coded.WireBytes)
			continue
		}
		require.Equal(t, 1.0, never.Ratio, "%s uncoded ratio", name)
		require.Equal(t, never.WireBytes, coded.UncodedBytes, "%s: uncoded equivalent of the coded run", name)
		require.Greater(t, coded.Ratio, 1.2, "%s coded ratio", name)
	}
	ratio := float64(wire["never"]) / float64(wire["always"])
	require.Greater(t, ratio, 1.3, "coded runs must send fewer bytes (never %d, always %d)", wire["never"], wire["always"])
}

// Ranks configured with different compression modes fail with a mismatch
// naming the modes, rather than hanging on incompatible messages.
func TestCompressionModeMismatch(t *testing.T) {
	r := newRigOpts(t, 2, func(rank int) map[string]string {
		return map[string]string{"compress": []string{"never", "always"}[rank]}
	})
	res := r.everyRank(func(rank int) *Op {
		b := gaussBF16(1, 1<<20)
		return &Op{Kind: opkind.AllGather, DType: dtype.BFloat16, In: [][]byte{b}, Out: [][]byte{make([]byte, len(b)), make([]byte, len(b))}}
	})
	requireAllFail(t, res, CodeMismatch, "compress=never")
}

// Under auto on loopback, the group measures itself once, finds every link
// inside one network namespace, and the switcher keeps payloads uncoded.
// Stats show the measured link (zipccl.link_model) once it is measured.
func TestAutoProbesAndStaysRawOnLoopback(t *testing.T) {
	r := newRigOpts(t, 2, func(int) map[string]string { return map[string]string{"compress": "auto"} })
	link := func() map[string]any {
		var st struct {
			Link map[string]any `json:"link"`
		}
		js, err := r.comms[1].Stats()
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(js, &st))
		return st.Link
	}
	require.Equal(t, map[string]any{"measured": false}, link())
	for i := 0; i < 2; i++ {
		for _, x := range r.everyRank(func(rank int) *Op {
			b := gaussBF16(uint64(rank), 1<<20)
			return &Op{Kind: opkind.AllGather, DType: dtype.BFloat16, In: [][]byte{b}, Out: [][]byte{make([]byte, len(b)), make([]byte, len(b))}}
		}) {
			require.NoError(t, x.err)
		}
	}
	for _, c := range r.comms {
		require.True(t, c.z.profile.Measured)
		require.Greater(t, c.z.profile.Beta, 0.0)
		require.False(t, math.IsInf(c.z.profile.Alpha, 0))
		// Every rank holds the same agreed profile.
		require.Equal(t, r.comms[0].z.profile, c.z.profile)
		require.Equal(t, r.comms[0].z.ratios, c.z.ratios)
	}
	require.True(t, r.comms[0].z.profile.NoCompress, "loopback links are not coded")
	p := r.comms[0].z.profile
	require.Equal(t, map[string]any{"measured": true, "latency_s": p.Alpha, "bytes_per_s": 1 / p.Beta, "local": true}, link())
	require.True(t, r.comms[0].z.local, "loopback links are local")
	st := opStats(t, r.comms[0])["all_gather"]
	require.Equal(t, int64(2), st.Count)
	require.Equal(t, map[string]int64{"raw": 2}, st.Choices)
}

// A group that never measures itself (compression never, or only ops that
// could not be coded) still learns from its checks that its links stay in
// one network namespace, once the ring's connections exist: every rank
// learns it at the same op, so that a broadcast takes the same algorithm
// (the tree between ranks of one host) on every rank.
func TestLocalityLearnedFromTheCheck(t *testing.T) {
	for _, mode := range []string{"never", "auto"} {
		t.Run(mode, func(t *testing.T) {
			const n = 3
			r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": mode} })
			for _, c := range r.comms {
				require.False(t, c.z.whereKnown)
			}
			for i := 0; i < 2; i++ {
				for _, x := range r.everyRank(func(rank int) *Op {
					b := make([]byte, 64) // int32s: never coded, never probed
					return &Op{Kind: opkind.AllReduce, DType: dtype.Int32, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
				}) {
					require.NoError(t, x.err)
				}
			}
			for _, c := range r.comms {
				require.True(t, c.z.whereKnown, "rank %d", c.cfg.Rank)
				require.True(t, c.z.local, "rank %d: loopback links are local", c.cfg.Rank)
				require.False(t, c.z.profile.Measured, "rank %d: learned without a probe", c.cfg.Rank)
			}
			// Large enough for the tree (not the root sending directly).
			bufs := make([][]byte, n)
			for _, x := range r.everyRank(func(rank int) *Op {
				bufs[rank] = make([]byte, 1<<20)
				if rank == 1 {
					copy(bufs[rank], gaussBF16(5, 1<<19))
				}
				return &Op{Kind: opkind.Broadcast, DType: dtype.BFloat16, Root: 1, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
			}) {
				require.NoError(t, x.err)
			}
			for rank := range bufs {
				require.Equal(t, gaussBF16(5, 1<<19), bufs[rank], "rank %d", rank)
			}
		})
	}
}

// The group's locality is the maximum of the ranks' reports: one remote
// link makes it remote, one link not connected yet leaves it unknown.
func TestWhereFolds(t *testing.T) {
	fold := func(ws ...float64) float64 {
		rec := make([]byte, recordLen)
		putTelemetry(rec[2*voteLen:], telemetry{where: ws[0]})
		for _, w := range ws[1:] {
			other := make([]byte, recordLen)
			putTelemetry(other[2*voteLen:], telemetry{where: w})
			mergeRecord(rec, other)
		}
		return getTelemetry(rec[2*voteLen:]).where
	}
	require.Equal(t, float64(whereLocal), fold(whereLocal, whereLocal, whereLocal))
	require.Equal(t, float64(whereUnknown), fold(whereLocal, whereUnknown, whereLocal))
	require.Equal(t, float64(whereRemote), fold(whereUnknown, whereRemote, whereLocal))
	require.Equal(t, float64(whereRemote), fold(whereLocal, whereRemote))
}

// gigabit makes c's agreed profile a 1 Gbit/s link's, with codec speeds
// of the order of this codec's (zip3 8 GB/s, huff 2 GB/s per core).
func gigabit(c *Comm) {
	speeds := [3]float64{0, 8e9, 2e9}
	c.z.profile = switcher.Profile{Measured: true, Alpha: 200e-6, Beta: 8 / 1e9, Enc: speeds, Dec: speeds}
}

// The switcher's feedback under auto: where the model codes but the coded
// calls measure slower than the raw one, the group moves to raw, every rank
// alike (a rank deciding otherwise would fail the agreement check), and the
// results keep their bits. Call times are injected: the rule, not this
// machine's speed, is under test.
func TestAutoFeedbackMovesToTheFasterPath(t *testing.T) {
	for _, codedSlower := range []bool{true, false} {
		t.Run(fmt.Sprintf("coded slower %v", codedSlower), func(t *testing.T) {
			defer func(f func(time.Time, switcher.Decision) float64) { callSeconds = f }(callSeconds)
			callSeconds = func(_ time.Time, d switcher.Decision) float64 {
				if d.Coded == codedSlower {
					return 0.2
				}
				return 0.1
			}
			const n, numel, calls = 3, 1 << 20, 8
			r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
			run := func() [][]byte {
				bufs := make([][]byte, n)
				for _, x := range r.everyRank(func(rank int) *Op {
					bufs[rank] = gaussBF16(uint64(rank), numel)
					return &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
				}) {
					require.NoError(t, x.err)
				}
				return bufs
			}
			want := run() // probes: loopback, so uncoded ("plain" two-shot)
			for _, c := range r.comms {
				// as if the links were 1 Gbit/s: now the model codes (with
				// fixed codec speeds, so that it expects both codecs to
				// beat raw however fast this machine codes today)
				gigabit(c)
			}
			for i := 0; i < calls; i++ {
				for rank, b := range run() {
					require.Equal(t, want[rank], b, "call %d rank %d", i, rank)
				}
			}
			// Under the override the model codes: its codec twice, raw
			// once, the other codec once, its codec again while that time
			// is on its way, then the fastest (plus the probing call before
			// the override: plain).
			wantPlain, wantOverrides := int64(1+1+calls-5), int64(1+1+calls-5)
			if !codedSlower {
				wantPlain, wantOverrides = 1+1, 2
			}
			for rank, c := range r.comms {
				st := opStats(t, c)["all_reduce"]
				require.Equal(t, int64(1+calls), st.Count)
				require.Equal(t, wantPlain, st.Choices["plain"], "rank %d: %v", rank, st.Choices)
				require.Equal(t, wantOverrides, st.Overrides, "rank %d", rank)
				require.Equal(t, opStats(t, r.comms[0])["all_reduce"].Choices, st.Choices, "rank %d", rank)
			}
		})
	}
}

// A call the ranks disagree on (here rank 0 passes a different size) fails
// on every rank and leaves the feedback as it was on each of them: the
// repeated calls after it, whose raw timing comes at the same call on every
// rank, all pass the agreement check.
func TestAutoFeedbackSurvivesAMismatch(t *testing.T) {
	defer func(f func(time.Time, switcher.Decision) float64) { callSeconds = f }(callSeconds)
	callSeconds = func(_ time.Time, d switcher.Decision) float64 {
		if d.Coded {
			return 0.2
		}
		return 0.1
	}
	const n, numel = 3, 1 << 20
	r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
	allReduce := func(size func(rank int) int) []result {
		return r.everyRank(func(rank int) *Op {
			b := gaussBF16(uint64(rank), size(rank))
			return &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: [][]byte{b}, Out: [][]byte{b}}
		})
	}
	same := func(int) int { return numel }
	for _, x := range allReduce(same) { // probes
		require.NoError(t, x.err)
	}
	for _, c := range r.comms {
		gigabit(c)
	}
	for _, x := range allReduce(same) {
		require.NoError(t, x.err)
	}
	requireAllFail(t, allReduce(func(rank int) int { return numel + 64*min(rank, 1) }), CodeMismatch)
	for i := 0; i < 8; i++ {
		for rank, x := range allReduce(same) {
			require.NoError(t, x.err, "call %d rank %d", i, rank)
		}
	}
	for rank, c := range r.comms {
		require.Equal(t, opStats(t, r.comms[0])["all_reduce"].Choices, opStats(t, c)["all_reduce"].Choices, "rank %d", rank)
	}
}

// unevenAllToAll runs one all_to_all of n ranks under r in which rank i
// sends numel(i, j) bf16 elements of data(seed, numel) to rank j, and
// checks every block bit for bit. It returns one rank's op (rank 0's).
func unevenAllToAll(t *testing.T, r *rig, n int, numel func(i, j int) int, data func(seed uint64, n int) []byte) *Op {
	t.Helper()
	outs := make([][][]byte, n)
	ops := make([]*Op, n)
	for _, x := range r.everyRank(func(i int) *Op {
		op := &Op{Kind: opkind.AllToAll, DType: dtype.BFloat16}
		for j := range n {
			op.In = append(op.In, data(uint64(100*i+j), numel(i, j)))
			op.Out = append(op.Out, make([]byte, 2*numel(j, i)))
		}
		outs[i], ops[i] = op.Out, op
		return op
	}) {
		require.NoError(t, x.err)
	}
	for i := range n {
		for j := range n {
			require.Equal(t, data(uint64(100*j+i), numel(j, i)), outs[i][j], "rank %d from %d", i, j)
		}
	}
	return ops[0]
}

// An all_to_all with uneven splits under auto, on links where the model
// codes: each rank holds a different payload (one below the compression
// size, the others above), yet every rank must take the same decision, and
// the feedback must key the call alike everywhere. Repeated, it passes the
// agreement check every time and delivers every block bit for bit.
func TestAutoUnevenAllToAllAgrees(t *testing.T) {
	const n = 3
	r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
	// rank i sends numel(i, j) bf16 elements to rank j
	numel := func(i, j int) int { return []int{40 << 10, 600 << 10, 900 << 10}[i] + 1024*j }
	unevenAllToAll(t, r, n, numel, gaussBF16) // probes (loopback: uncoded)
	for _, c := range r.comms {
		gigabit(c)
	}
	for range 8 {
		op := unevenAllToAll(t, r, n, numel, gaussBF16)
		require.False(t, r.comms[0].agreeSizeFirst(op), "the last call's size is agreed: no exchange before the data")
	}
	st := opStats(t, r.comms[0])["all_to_all"]
	require.NotZero(t, st.Choices["zip3"]+st.Choices["huff"], "%v: the model codes these calls", st.Choices)
	for rank, c := range r.comms {
		require.Equal(t, st.Choices, opStats(t, c)["all_to_all"].Choices, "rank %d", rank)
	}
}

// The same calls on random bits: once the group has learnt that they do
// not compress, the model codes no size of them, so the ranks skip the size
// exchange and run the check alongside the data, each uncoded, still
// agreeing call after call.
func TestAutoUnevenAllToAllOfRandomBits(t *testing.T) {
	const n = 3
	r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
	numel := func(i, j int) int { return []int{40 << 10, 600 << 10, 900 << 10}[i] + 1024*j }
	random := func(seed uint64, n int) []byte {
		rng := rand.New(rand.NewPCG(seed, 9))
		b := make([]byte, 2*n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	unevenAllToAll(t, r, n, numel, random) // probes; learns the ratios
	for _, c := range r.comms {
		gigabit(c)
	}
	for i := range 6 {
		op := unevenAllToAll(t, r, n, numel, random)
		require.False(t, r.comms[0].agreeSizeFirst(op), "call %d: no size codes", i)
	}
	for rank, c := range r.comms {
		require.Equal(t, map[string]int64{"raw": 7}, opStats(t, c)["all_to_all"].Choices, "rank %d", rank)
	}
}

// The first all_to_all under auto measures the group whatever its size, so
// that its ranks, each knowing only its own splits, need not agree their
// sizes first on every later call. A rank that sends nothing in it times
// the codec on stand-in data: its empty sample used to fold the group's
// codec speed to zero, which kept every later call uncoded.
func TestFirstAllToAllMeasuresTheGroup(t *testing.T) {
	for _, first := range []int{0, 4 << 10} { // rank 0's elements per peer
		t.Run(fmt.Sprint(first), func(t *testing.T) {
			const n = 3
			r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
			numel := func(i, j int) int { return []int{first, 8 << 10, 20 << 10}[i] }
			op := unevenAllToAll(t, r, n, numel, gaussBF16)
			for rank, c := range r.comms {
				p := c.z.profile
				require.True(t, p.Measured, "rank %d", rank)
				for _, k := range []codec.Kind{codec.Zip3, codec.Huff} {
					require.Positive(t, p.Enc[k], "rank %d: %v encode speed", rank, k)
					require.Positive(t, p.Dec[k], "rank %d: %v decode speed", rank, k)
				}
				require.Equal(t, r.comms[0].z.profile, p, "rank %d", rank)
			}
			// loopback: nothing codes, so the sizes need no agreement
			require.False(t, r.comms[0].agreeSizeFirst(op))
			unevenAllToAll(t, r, n, numel, gaussBF16)
		})
	}
}

// Where the model codes some sizes, the first all_to_all of a dtype agrees
// its size before the data; every later one is decided on the largest
// payload of the one before, agreed by that call's check, and runs its
// check alongside the data. A call much smaller or larger than the last
// is then decided as for the last one's size: every rank alike, with every
// block delivered bit for bit.
func TestAutoAllToAllDecidesOnTheLastAgreedSize(t *testing.T) {
	const n = 3
	r := newRigOpts(t, n, func(int) map[string]string { return map[string]string{"compress": "auto"} })
	for _, c := range r.comms {
		gigabit(c) // measured: no probing call
	}
	large := func(i, j int) int { return []int{40 << 10, 600 << 10, 900 << 10}[i] + 1024*j }
	small := func(i, j int) int { return 1000 + 100*i + j } // all below the compression size
	choices := func() map[string]int64 {
		ch := opStats(t, r.comms[0])["all_to_all"].Choices
		for rank, c := range r.comms {
			require.Equal(t, ch, opStats(t, c)["all_to_all"].Choices, "rank %d", rank)
		}
		return ch
	}
	op := &Op{Kind: opkind.AllToAll, DType: dtype.BFloat16}
	require.True(t, r.comms[0].agreeSizeFirst(op), "no size agreed yet")
	unevenAllToAll(t, r, n, large, gaussBF16) // agrees its size first
	require.False(t, r.comms[0].agreeSizeFirst(op))
	require.Equal(t, int64(1), choices()["huff"]+choices()["zip3"], "%v", choices())
	unevenAllToAll(t, r, n, small, gaussBF16) // decided as for the large one
	require.Equal(t, int64(2), choices()["huff"]+choices()["zip3"], "%v", choices())
	unevenAllToAll(t, r, n, large, gaussBF16) // decided as for the small one
	require.Equal(t, int64(1), choices()["raw"], "%v", choices())
	require.Zero(t, opStats(t, r.comms[0])["all_to_all"].Overrides, "the model left it raw")
	// decided as for the large one again: the model codes it. The small
	// call decided as for that size does not count for the feedback (its
	// time is not a large call's), so this is the second call of the large
	// size, and only the next one is run raw once to time it.
	unevenAllToAll(t, r, n, large, gaussBF16)
	require.Equal(t, int64(3), choices()["huff"]+choices()["zip3"], "%v", choices())
	require.Zero(t, opStats(t, r.comms[0])["all_to_all"].Overrides)
	unevenAllToAll(t, r, n, large, gaussBF16)
	require.Equal(t, int64(2), choices()["raw"], "%v", choices())
	for rank, c := range r.comms {
		require.Equal(t, int64(1), opStats(t, c)["all_to_all"].Overrides, "rank %d", rank)
	}
	require.Equal(t, map[dtype.DType]int{dtype.BFloat16: 2 * 3 * (900<<10 + 1024)}, r.comms[1].a2aSize)
}

// Error messages name an op by its descriptor: an all_to_all's lengths are
// per pair (checked message by message), so it shows none.
func TestDescriptorNames(t *testing.T) {
	a2a := &Op{Kind: opkind.AllToAll, DType: dtype.BFloat16, In: [][]byte{nil, make([]byte, 64)}, Out: [][]byte{nil, make([]byte, 8)}}
	coded := switcher.Decision{Zcoll: true, Coded: true, Kind: codec.Zip3}
	require.Equal(t, "all_to_all(bfloat16, compress=always, coded zip3)", describe(a2a, 0).withDecision(switcher.Always, coded, false).String())
	ar := &Op{Kind: opkind.AllReduce, DType: dtype.Float32, In: [][]byte{make([]byte, 4096)}, ReduceOp: reduce.Sum}
	require.Equal(t, "all_reduce(float32, 1024 elements, SUM)", describe(ar, 0).String())
}
