package switcher

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Two link profiles measured on this kind of machine: loopback TCP (a few
// GB/s) and a 1 Gbit/s shaped veth; the codec speeds are the order of the
// Go codec's (zip3 ~10 GB/s, huff ~2 GB/s per core).
var (
	codecSpeeds = [3]float64{0, 8e9, 2e9}
	// The engine marks a group whose links all stay inside one network
	// namespace NoCompress: there a transfer is a memory copy on the same
	// cores the codec would use.
	loopback = Profile{Measured: true, Alpha: 30e-6, Beta: 1 / 3e9, Enc: codecSpeeds, Dec: codecSpeeds, NoCompress: true}
	gigabit  = Profile{Measured: true, Alpha: 200e-6, Beta: 8 / 1e9, Enc: codecSpeeds, Dec: codecSpeeds}
	tenGig   = Profile{Measured: true, Alpha: 50e-6, Beta: 8 / 10e9, Enc: codecSpeeds, Dec: codecSpeeds}
)

func in(op Op, dt dtype.DType, bytes int, mode Mode, p Profile) Input {
	return Input{Op: op, DType: dt, Bytes: bytes, Ranks: 4, Mode: mode, Profile: p}
}

func TestLoopbackStaysRaw(t *testing.T) {
	for _, op := range []Op{AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, SendRecv} {
		for _, size := range []int{1 << 20, 64 << 20, 256 << 20} {
			d := Decide(in(op, dtype.BFloat16, size, Auto, loopback), DefaultThresholds)
			require.False(t, d.Coded, "%v %d: %s", op, size, d.Why)
			require.True(t, Decide(in(op, dtype.BFloat16, size, Always, loopback), DefaultThresholds).Coded, "always still codes")
		}
	}
}

func TestSlowLinkCodes(t *testing.T) {
	for _, op := range []Op{AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, SendRecv} {
		d := Decide(in(op, dtype.BFloat16, 64<<20, Auto, gigabit), DefaultThresholds)
		require.True(t, d.Coded, "%v: %s", op, d.Why)
		require.True(t, d.Zcoll)
		require.Less(t, d.PredCoded, d.PredRaw)
		// On a slower link huff's better ratio beats zip3's speed.
		slow := gigabit
		slow.Beta *= 10
		require.Equal(t, codec.Huff, Decide(in(op, dtype.BFloat16, 64<<20, Auto, slow), DefaultThresholds).Kind, "%v", op)
	}
	// At 10 Gbit/s huff's ~2 GB/s no longer keeps up; zip3 still pays.
	d := Decide(in(AllGather, dtype.BFloat16, 64<<20, Auto, tenGig), DefaultThresholds)
	require.True(t, d.Coded, d.Why)
	require.Equal(t, codec.Zip3, d.Kind)
}

func TestModesAndThresholds(t *testing.T) {
	d := Decide(in(AllGather, dtype.BFloat16, 64<<20, Never, gigabit), DefaultThresholds)
	require.False(t, d.Coded)
	require.False(t, d.Zcoll)
	d = Decide(in(AllGather, dtype.BFloat16, 4096, Always, Profile{}), DefaultThresholds)
	require.True(t, d.Coded, "always codes even before measuring")
	d = Decide(in(AllGather, dtype.BFloat16, 512<<10, Auto, gigabit), DefaultThresholds)
	require.False(t, d.Coded, "below CompressMin")
	d = Decide(in(AllGather, dtype.BFloat16, 64<<20, Auto, Profile{}), DefaultThresholds)
	require.False(t, d.Coded, "auto waits for a measured link")
	d = Decide(in(AllGather, dtype.Int64, 64<<20, Always, gigabit), DefaultThresholds)
	require.False(t, d.Coded, "integers are never coded")
	nv := gigabit
	nv.NoCompress = true
	require.False(t, Decide(in(AllGather, dtype.BFloat16, 64<<20, Auto, nv), DefaultThresholds).Coded)
}

// Turning compression on or off must not change a reduction's algorithm
// family, so results are bit-identical either way.
func TestReductionFamilyIndependentOfMode(t *testing.T) {
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32, dtype.Float8E4M3FN} {
		for _, size := range []int{4 << 10, 1 << 20, 64 << 20} {
			for _, op := range []Op{AllReduce, ReduceScatter} {
				var fam []bool
				for _, mode := range []Mode{Auto, Always, Never} {
					for _, p := range []Profile{{}, loopback, gigabit} {
						fam = append(fam, Decide(in(op, dt, size, mode, p), DefaultThresholds).Zcoll)
					}
				}
				for _, f := range fam {
					require.Equal(t, fam[0], f, "%v %v %d", op, dt, size)
				}
				require.Equal(t, size >= DefaultThresholds.TwoShotMin, fam[0])
			}
		}
	}
	require.False(t, Decide(in(AllReduce, dtype.Float64, 64<<20, Auto, gigabit), DefaultThresholds).Zcoll)
	require.False(t, Decide(in(AllReduce, dtype.Int32, 64<<20, Auto, gigabit), DefaultThresholds).Zcoll)
}

// Incompressible data (a measured ratio near 1) stays raw.
func TestIncompressibleStaysRaw(t *testing.T) {
	x := in(AllGather, dtype.BFloat16, 64<<20, Auto, gigabit)
	x.Ratio = [3]float64{1, 0.99, 1.0}
	require.False(t, Decide(x, DefaultThresholds).Coded)
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"": Auto, "AUTO": Auto, "always": Always, "never": Never, "off": Never} {
		m, err := ParseMode(s)
		require.NoError(t, err)
		require.Equal(t, want, m)
	}
	_, err := ParseMode("sometimes")
	require.ErrorContains(t, err, "sometimes")
}

// CodesAtSomeSize must agree with Decide over the whole size range: if it
// says no size codes, ranks with different payloads skip the size exchange
// and would run different protocols should any size code after all.
func TestCodesAtSomeSize(t *testing.T) {
	var sizes []int
	for b := 1; b < 1<<46; b *= 2 {
		sizes = append(sizes, b-1, b, b+b/3)
	}
	sizes = append(sizes, math.MaxInt)
	slowCodec := tenGig
	slowCodec.Enc, slowCodec.Dec = [3]float64{0, 1e9, 0.3e9}, [3]float64{0, 1e9, 0.3e9}
	// a long-haul link (weights synced across sites), where a barely
	// compressible call pays only once its transfer dwarfs the latency
	wan := Profile{Measured: true, Alpha: 50e-3, Beta: 8 / 1e9, Enc: codecSpeeds, Dec: codecSpeeds}
	profiles := []Profile{{}, loopback, gigabit, tenGig, slowCodec, wan, {Measured: true, Alpha: 1e-3, Beta: 8 / 100e9, Enc: codecSpeeds, Dec: codecSpeeds}}
	ratios := [][3]float64{{}, {1, 1.001, 1.0005}, {1, 1.05, 1.06}, {1, 1.08, 1.09}, {1, 1.42, 1.51}}
	seen := map[bool]int{}
	for _, op := range []Op{AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, SendRecv} {
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Int32} {
			for _, mode := range []Mode{Auto, Always, Never} {
				for _, p := range profiles {
					for _, r := range ratios {
						x := in(op, dt, 0, mode, p)
						x.Ratio = r
						some := CodesAtSomeSize(x, DefaultThresholds)
						seen[some]++
						coded := false
						for _, b := range sizes {
							x.Bytes = b
							coded = coded || Decide(x, DefaultThresholds).Coded
						}
						require.Equal(t, coded, some, "%v %v %v %+v ratios %v", op, dt, mode, p, r)
					}
				}
			}
		}
	}
	require.Positive(t, seen[true])
	require.Positive(t, seen[false])
	// the case the engine relies on: random bits on a 10 Gbit/s link
	x := in(AllToAll, dtype.BFloat16, 0, Auto, tenGig)
	x.Ratio = [3]float64{1, 1.001, 1.0005}
	require.False(t, CodesAtSomeSize(x, DefaultThresholds))
	x.Ratio = [3]float64{}
	require.True(t, CodesAtSomeSize(x, DefaultThresholds))
}
