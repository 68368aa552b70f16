// Package switcher decides, per collective call, whether moving coded bytes
// beats moving raw ones, with an alpha-beta cost model in the spirit of
// NCCL's tuner and ZipCCL's adaptive switcher:
//
//	T_raw  = m*alpha + W*beta
//	T_comp = m*alpha + max(W*beta/e, C) + (1-overlap)*min(W*beta/e, C)
//	C      = E/s_enc + D/s_dec
//
// where m is the number of sequential message rounds of the algorithm, W
// the bytes one rank sends, e the compression ratio, E and D the raw bytes
// one rank encodes and decodes, and s_enc, s_dec the codec's speeds. The
// algorithms pipeline coding with transfer by segments, but only part of
// the shorter of the two is credited as hidden (Overlap), and Auto codes
// only when the gain exceeds Margin, so the model errs towards raw.
//
// Every input to Decide must be identical on every rank (the engine agrees
// on the profile and the ratio estimates through the group), so every rank
// reaches the same decision without talking.
package switcher

import (
	"fmt"
	"math"
	"strings"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
)

// Mode is the user's compression setting (ZIPCCL_COMPRESS or the group's
// "compress" option).
type Mode uint8

// The modes.
const (
	Auto   Mode = iota // compress when the model says it pays
	Always             // compress every float payload that can be coded
	Never              // never code payloads
)

func (m Mode) String() string {
	switch m {
	case Always:
		return "always"
	case Never:
		return "never"
	}
	return "auto"
}

// ParseMode reads a mode name; "" means Auto.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return Auto, nil
	case "always", "on", "1", "true":
		return Always, nil
	case "never", "off", "0", "false":
		return Never, nil
	}
	return Auto, fmt.Errorf("zipccl: unknown compression mode %q (want auto, always or never)", s)
}

// Op is the collective being decided.
type Op uint8

// The collectives the switcher knows.
const (
	AllReduce Op = iota
	ReduceScatter
	AllGather
	AllToAll
	Broadcast
	SendRecv
)

var opNames = [...]string{"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// OpOf maps an operation kind to the collective the switcher decides for;
// ok is false for kinds that are never coded.
func OpOf(k opkind.Kind) (op Op, ok bool) {
	switch k {
	case opkind.AllReduce:
		return AllReduce, true
	case opkind.ReduceScatter:
		return ReduceScatter, true
	case opkind.AllGather:
		return AllGather, true
	case opkind.AllToAll:
		return AllToAll, true
	case opkind.Broadcast:
		return Broadcast, true
	}
	return 0, false
}

// Profile is what the group measured about itself, agreed by all ranks:
// the worst link and the slowest codec.
type Profile struct {
	Measured bool
	Alpha    float64 // seconds of latency per message round
	Beta     float64 // seconds per byte on the slowest link
	// Raw bytes per second one rank encodes or decodes, per kind.
	Enc, Dec   [3]float64 // indexed by codec.Kind: Raw, Zip3, Huff
	NoCompress bool       // e.g. NVLink: never compress
}

// Defaults are the thresholds; they are the same on every rank.
type Defaults struct {
	// TwoShotMin: float reductions of at least this many bytes use the
	// two-shot family (coded or not), so that turning compression on or
	// off never changes their result. Below it, the latency-optimal
	// uncompressed path runs.
	TwoShotMin int
	// CompressMin: Auto never codes payloads smaller than this.
	CompressMin int
	// Margin: Auto codes only when T_comp < (1-Margin) * T_raw.
	Margin float64
	// Overlap: the share of the shorter of coding and transfer time that
	// is assumed hidden by pipelining. The algorithms code segment by
	// segment while earlier ones are on the wire, so only the first and
	// last segments' coding is exposed; 0.75 leaves room for CPU contention.
	// (At 1 Gbit/s, 4 ranks, bf16 64 MiB, coded all_reduce and all_gather
	// ran within about 10% of their wire time, and huff, whose coding costs
	// 5x zip3's, beat zip3 by its better ratio: benchmarks/RESULTS.md.)
	Overlap float64
}

// DefaultThresholds are the engine's defaults.
var DefaultThresholds = Defaults{TwoShotMin: 1 << 20, CompressMin: 1 << 20, Margin: 0.05, Overlap: 0.75}

// Input is one call to decide.
type Input struct {
	Op    Op
	DType dtype.DType
	Bytes int // the op's payload per rank: the buffer (all-reduce), the
	// whole input (reduce-scatter, all-to-all), the whole output
	// (all-gather), the buffer (broadcast, send/recv)
	Ranks   int
	Mode    Mode
	Profile Profile
	// Ratio estimates (raw/coded bytes) for this dtype, per kind; 0 means
	// unknown (the dtype's prior is used).
	Ratio [3]float64
}

// Decision is the outcome.
type Decision struct {
	// Zcoll: run the zcoll algorithm family (two-shot all-reduce, all-to-all
	// reduce-scatter, frame-forwarding all-gather, split-send broadcast),
	// in its plain form when not Coded; otherwise the uncompressed
	// latency/bandwidth-optimal algorithms of package collective.
	Zcoll bool
	// Coded: payloads travel as codec frames of Kind.
	Coded bool
	Kind  codec.Kind
	// Predicted seconds, for the stats (0 when not modelled).
	PredRaw, PredCoded float64
	Why                string
	// Measured: Feedback ran the call another way than the model chose
	// (uncoded, or with the other codec).
	Measured bool
}

// Label names the decision in statistics.
func (d Decision) Label() string {
	switch {
	case d.Coded:
		return d.Kind.String()
	case d.Zcoll:
		return "plain"
	}
	return "raw"
}

// Compressible reports whether the codec codes dt.
func Compressible(dt dtype.DType) bool {
	return codec.EffectiveKind(dt, codec.Zip3) != codec.Raw
}

// prior is the ratio assumed before anything was measured: the codec's
// measured Gaussian ratios, rounded down.
func prior(dt dtype.DType, k codec.Kind) float64 {
	switch dt {
	case dtype.BFloat16:
		return [3]float64{1, 1.40, 1.48}[k]
	case dtype.Float16:
		return [3]float64{1, 1.12, 1.16}[k]
	case dtype.Float32:
		return [3]float64{1, 1.16, 1.19}[k]
	case dtype.Float8E5M2:
		return [3]float64{1, 1.25, 1.40}[k]
	case dtype.Float8E4M3FN:
		return [3]float64{1, 1.08, 1.18}[k]
	}
	return 1
}

// shape returns, for an op on n ranks with payload d, the bytes one rank
// sends (W), encodes (E) and decodes (D), and the sequential message
// rounds (m) of the coded algorithm.
func shape(op Op, d float64, n int) (w, e, dec, m float64) {
	f := float64(n-1) / float64(n)
	switch op {
	case AllReduce: // all-to-all reduce-scatter, then each owner to all
		// (on the CPU; the GPU path gathers over NCCL's ring instead, n-1
		// rounds, but the term is the same for raw and coded either way)
		return 2 * f * d, f*d + d/float64(n), 2 * f * d, 2
	case ReduceScatter, AllToAll:
		return f * d, f * d, f * d, 1
	case AllGather: // ring over the output
		return f * d, d / float64(n), f * d, float64(n - 1)
	case Broadcast: // pipelined chain
		return d, d, d, float64(n - 1)
	case SendRecv:
		return d, d, d, 1
	}
	return d, d, d, 1
}

// Decide chooses the algorithm family and whether to code payloads.
func Decide(in Input, th Defaults) Decision {
	var dec Decision
	reduction := in.Op == AllReduce || in.Op == ReduceScatter
	compressible := Compressible(in.DType) && in.Ranks > 1
	if reduction && in.DType.IsFloat() && in.DType != dtype.Float64 && in.Ranks > 1 && in.Bytes >= th.TwoShotMin {
		dec.Zcoll = true
	}
	if !compressible || in.Mode == Never || in.Bytes == 0 {
		dec.Why = "not coded: " + map[bool]string{true: "mode never", false: "dtype not coded or single rank"}[in.Mode == Never]
		return dec
	}
	if reduction && !dec.Zcoll {
		dec.Why = "below the two-shot size"
		return dec
	}
	if in.Mode == Always {
		dec.Zcoll, dec.Coded, dec.Kind = true, true, codec.Zip3
		if in.Profile.Measured {
			dec.Kind = bestKind(in, th)
		}
		dec.Why = "mode always"
		return dec
	}
	switch {
	case in.Bytes < th.CompressMin:
		dec.Why = "below the compression size"
		return dec
	case !in.Profile.Measured:
		dec.Why = "link not measured yet"
		return dec
	case in.Profile.NoCompress:
		dec.Why = "link excluded from compression"
		return dec
	}
	huff, zip3 := predict(in, th, codec.Huff), predict(in, th, codec.Zip3)
	k, coded := codec.Zip3, zip3
	if huff < zip3 {
		k, coded = codec.Huff, huff
	}
	raw := predict(in, th, codec.Raw)
	dec.PredRaw, dec.PredCoded = raw, coded
	alt := fmt.Sprintf("huff %.3gs, zip3 %.3gs", huff, zip3)
	if coded < (1-th.Margin)*raw {
		dec.Zcoll, dec.Coded, dec.Kind = true, true, k
		dec.Why = fmt.Sprintf("model: coded (%s) < raw %.3gs", alt, raw)
	} else {
		dec.Why = fmt.Sprintf("model: raw %.3gs <= coded (%s)", raw, alt)
	}
	return dec
}

// CodesAtSomeSize reports whether Decide codes calls like in at some
// payload (in.Bytes is ignored). Every modelled time is the same latency
// term plus a cost linear in the payload, and the size thresholds are
// lower bounds, so the sizes that code are all those above one size: a
// call not coded at the largest payload is coded at none. Ranks that hold
// the same agreed state and know only their own payloads (an all_to_all
// with uneven splits) then decide alike without exchanging sizes.
func CodesAtSomeSize(in Input, th Defaults) bool {
	in.Bytes = math.MaxInt
	return Decide(in, th).Coded
}

func ratio(in Input, k codec.Kind) float64 {
	if r := in.Ratio[k]; r > 0 {
		return r
	}
	return prior(in.DType, k)
}

// predict returns the modelled seconds with payload kind k (Raw: uncoded).
func predict(in Input, th Defaults, k codec.Kind) float64 {
	p := in.Profile
	w, e, d, m := shape(in.Op, float64(in.Bytes), in.Ranks)
	t := m * p.Alpha
	if k == codec.Raw {
		return t + w*p.Beta
	}
	if p.Enc[k] <= 0 || p.Dec[k] <= 0 {
		return math.Inf(1)
	}
	wire := w * p.Beta / ratio(in, k)
	coding := e/p.Enc[k] + d/p.Dec[k]
	return t + max(wire, coding) + (1-th.Overlap)*min(wire, coding)
}

// bestKind picks the coded kind with the lowest modelled time.
func bestKind(in Input, th Defaults) codec.Kind {
	if in.Profile.Measured && predict(in, th, codec.Huff) < predict(in, th, codec.Zip3) {
		return codec.Huff
	}
	return codec.Zip3
}
