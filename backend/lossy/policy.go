// Package lossy holds zipccl's opt-in lossy collectives: the policy a user
// gives a group (which op may be coded lossily, how, from what size), and
// the algorithms that code with package quant. Torch defines collectives
// as exact, so nothing here runs unless the policy asks for it.
package lossy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

// DefaultMinBytes is the smallest tensor coded lossily unless the policy
// says otherwise: below it quantization saves nothing worth its error.
const DefaultMinBytes = 64 << 10

// Unit is the granule the collectives cut tensors at (pipeline pieces,
// all_reduce's shards): a multiple of every mode's block, so the blocks,
// and the bytes, do not depend on the cut.
const Unit = 2048

// BlockOf is mode's elements per scale, measured on real tensors
// (RESULTS.md, "Lossy collectives"): int8, for weights, 2048 (0.75x the
// error of DeepSpeed's quantizer on real weights for 0.2 % more bytes);
// int4, for gradients, 256 (0.51 to 0.65x the error of 2048 on the demo's
// gradients for 3 % more bytes). fp8's is the policy's (DefaultFP8Block
// unless set).
func BlockOf(m quant.Mode) int {
	switch m {
	case quant.Int4:
		return 256
	case quant.FP8:
		return DefaultFP8Block
	}
	return 2048
}

// DefaultFP8Block is fp8's block unless the policy sets fp8_block: TACO's
// default, the fastest of its block sizes at TP 4.
const DefaultFP8Block = 256

// Coding is how an op is coded: a mode (quant.None: exact) and its block.
type Coding struct {
	Mode  quant.Mode
	Block int
}

func (c Coding) String() string {
	if c.Mode == quant.FP8 {
		return fmt.Sprintf("%v (block %d)", c.Mode, c.Block)
	}
	return c.Mode.String()
}

// Policy is a group's lossy modes: what the user asked for.
type Policy struct {
	AllGather     quant.Mode
	ReduceScatter quant.Mode
	AllReduce     quant.Mode
	MinBytes      int
	FP8Block      int // fp8's elements per block, a power of two from 32 to 1024
}

// Lossless reports whether the policy codes nothing lossily.
func (p Policy) Lossless() bool {
	return p.AllGather == quant.None && p.ReduceScatter == quant.None && p.AllReduce == quant.None
}

// String is the policy as Parse reads it, e.g.
// "all_gather=int8,reduce_scatter=int4,min_bytes=65536", or "lossless".
func (p Policy) String() string {
	if p.Lossless() {
		return "lossless"
	}
	var s []string
	fp8 := false
	for _, name := range opNames {
		if m := p.Mode(ops[name]); m != quant.None {
			s = append(s, fmt.Sprintf("%s=%v", name, m))
			fp8 = fp8 || m == quant.FP8
		}
	}
	if fp8 {
		s = append(s, fmt.Sprintf("fp8_block=%d", p.FP8Block))
	}
	return strings.Join(append(s, fmt.Sprintf("min_bytes=%d", p.MinBytes)), ",")
}

// Coding is the policy's coding for an op kind.
func (p Policy) Coding(k opkind.Kind) Coding {
	m := p.Mode(k)
	if m == quant.FP8 {
		return Coding{m, p.FP8Block}
	}
	return Coding{m, BlockOf(m)}
}

// Mode is the policy's mode for an op kind.
func (p Policy) Mode(k opkind.Kind) quant.Mode {
	switch k {
	case opkind.AllGather:
		return p.AllGather
	case opkind.ReduceScatter:
		return p.ReduceScatter
	case opkind.AllReduce:
		return p.AllReduce
	}
	return quant.None
}

// set gives op kind k mode m.
func (p *Policy) set(k opkind.Kind, m quant.Mode) {
	switch k {
	case opkind.AllGather:
		p.AllGather = m
	case opkind.ReduceScatter:
		p.ReduceScatter = m
	case opkind.AllReduce:
		p.AllReduce = m
	}
}

// Applies returns the coding an op runs with under p: the op kind's
// when the tensor is a float32, bfloat16 or float16 one of at least
// MinBytes (total, the same on every rank) and a reduction sums; else
// quant.None's. Every rank computes the same answer from the same op.
func (p Policy) Applies(k opkind.Kind, dt dtype.DType, op reduce.Op, totalBytes int) Coding {
	c := p.Coding(k)
	if c.Mode == quant.None || !quant.Supported(dt) || totalBytes < p.MinBytes ||
		k.IsReduction() && op != reduce.Sum && op != reduce.Avg {
		return Coding{}
	}
	return c
}

// ops are the op names a policy may name; opNames in the order String
// writes them.
var ops = map[string]opkind.Kind{
	"all_gather":     opkind.AllGather,
	"reduce_scatter": opkind.ReduceScatter,
	"all_reduce":     opkind.AllReduce,
}

var opNames = []string{"all_gather", "reduce_scatter", "all_reduce"}

// Parse reads a policy: comma-separated op=mode pairs (all_gather,
// reduce_scatter, all_reduce; int8, int4, fp8), min_bytes=N and
// fp8_block=B. An empty spec is the lossless policy. Modes that make no
// sense for an op (int4 weights) are refused here, when the policy is set,
// never at the op.
func Parse(spec string) (Policy, error) {
	p := Policy{MinBytes: DefaultMinBytes, FP8Block: DefaultFP8Block}
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "lossless" {
		return p, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.ToLower(strings.TrimSpace(val))
		if !ok || key == "" {
			return Policy{}, fmt.Errorf("zipccl: lossy policy %q: %q is not op=mode", spec, item)
		}
		if seen[key] {
			return Policy{}, fmt.Errorf("zipccl: lossy policy %q: %s given twice", spec, key)
		}
		seen[key] = true
		if key == "min_bytes" {
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return Policy{}, fmt.Errorf("zipccl: lossy policy %q: min_bytes=%q: want a byte count >= 0", spec, val)
			}
			p.MinBytes = n
			continue
		}
		if key == "fp8_block" {
			n, err := strconv.Atoi(val)
			if err != nil || quant.CheckBlock(quant.FP8, n) != nil {
				return Policy{}, fmt.Errorf("zipccl: lossy policy %q: fp8_block=%q: want a power of two from 32 to %d", spec, val, quant.MaxBlock(quant.FP8))
			}
			p.FP8Block = n
			continue
		}
		k, known := ops[key]
		if !known {
			return Policy{}, fmt.Errorf("zipccl: lossy policy %q: unknown op %q (want %s)", spec, key, names())
		}
		if val == "none" || val == "lossless" {
			continue
		}
		switch {
		case val != "int8" && val != "int4" && val != "fp8":
			return Policy{}, fmt.Errorf("zipccl: lossy policy %q: unknown mode %q for %s (want int8, int4 or fp8)", spec, val, key)
		case k == opkind.AllGather && val == "int4":
			return Policy{}, fmt.Errorf("zipccl: lossy policy %q: int4 makes no sense for all_gather (it gathers weights: use int8)", spec)
		case val == "int8":
			p.set(k, quant.Int8)
		case val == "int4":
			p.set(k, quant.Int4)
		default:
			p.set(k, quant.FP8)
		}
	}
	return p, nil
}

func names() string { return strings.Join(opNames, ", ") }
