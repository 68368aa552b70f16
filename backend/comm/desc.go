package comm

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/bits"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/transport"
)

// The op descriptor travels in every message (transport.Desc, 32 bytes) and
// holds what every rank must agree on for the op:
//
//	0  kind u8
//	1  dtype u8
//	2  reduce op u8 (0xff when the op does not reduce)
//	3  flags: bits 0-1 compression mode, bit 2 zcoll family, bit 3 coded
//	   payloads, bits 4-5 codec kind (the switcher's decision), bit 6
//	   hierarchical (so that ranks configured differently fail with a
//	   mismatch, not a hang)
//	4  root i32 (-1 when the op has no root)
//	8  count u64: elements that must be equal on every rank (0 if none)
//	16 sizes u64: FNV-1a of per-rank element counts that must agree (0 if none)
//	24 lossy mode u8: the group's lossy policy for this op kind (quant.Mode,
//	   0 when exact), so that ranks whose policies differ fail naming it
//	25 log2 of the policy's fp8 block u8 (0 unless the mode is fp8)
//	26 zero (2 bytes)
//	28 the policy's min_bytes u32 (saturated; 0 when the mode is 0)
const noReduce = 0xff

type descFields struct {
	kind   opkind.Kind
	dt     dtype.DType
	redop  uint8
	flags  uint8
	root   int32
	count  uint64
	layout uint64
	lossy  lossy.Coding
	minB   uint32
}

func (f descFields) encode() transport.Desc {
	var d transport.Desc
	d[0] = byte(f.kind)
	d[1] = byte(f.dt)
	d[2] = f.redop
	d[3] = f.flags
	binary.LittleEndian.PutUint32(d[4:], uint32(f.root))
	binary.LittleEndian.PutUint64(d[8:], f.count)
	binary.LittleEndian.PutUint64(d[16:], f.layout)
	d[24] = byte(f.lossy.Mode)
	if f.lossy.Mode == quant.FP8 {
		d[25] = byte(bits.TrailingZeros(uint(f.lossy.Block)))
	}
	binary.LittleEndian.PutUint32(d[28:], f.minB)
	return d
}

func decodeDesc(d transport.Desc) descFields {
	return descFields{
		kind:   opkind.Kind(d[0]),
		dt:     dtype.DType(d[1]),
		redop:  d[2],
		flags:  d[3],
		root:   int32(binary.LittleEndian.Uint32(d[4:])),
		count:  binary.LittleEndian.Uint64(d[8:]),
		layout: binary.LittleEndian.Uint64(d[16:]),
		lossy:  lossy.Coding{Mode: quant.Mode(d[24]), Block: 1 << d[25]},
		minB:   binary.LittleEndian.Uint32(d[28:]),
	}
}

// String renders a descriptor for error messages, e.g.
// "all_reduce(float32, 1024 elements, SUM)".
func (f descFields) String() string {
	if f.kind == opkind.Barrier {
		return "barrier()"
	}
	s := fmt.Sprintf("%s(%s", f.kind, f.dt)
	if f.kind != opkind.AllToAll && (f.count != 0 || f.layout == 0) { // all_to_all: lengths per pair
		s += fmt.Sprintf(", %d elements", f.count)
	}
	if f.layout != 0 {
		s += fmt.Sprintf(", per-rank sizes #%08x", uint32(f.layout))
	}
	if f.redop != noReduce {
		s += ", " + reduce.Op(f.redop).String()
	}
	if f.root >= 0 {
		s += fmt.Sprintf(", root %d", f.root)
	}
	if m := switcher.Mode(f.flags & 3); m != switcher.Auto {
		s += ", compress=" + m.String()
	}
	switch {
	case f.flags&flagCoded != 0:
		s += ", coded " + codec.Kind(f.flags>>4&3).String()
	case f.flags&flagZcoll != 0:
		s += ", two-shot"
	}
	if f.flags&flagHier != 0 {
		s += ", hierarchical"
	}
	if f.lossy.Mode != quant.None {
		s += fmt.Sprintf(", lossy policy %v from %d bytes", f.lossy, f.minB)
	}
	return s + ")"
}

const (
	flagZcoll = 1 << 2
	flagCoded = 1 << 3
	flagHier  = 1 << 6
)

// withDecision records the compression mode, the switcher's decision and
// whether the op runs hierarchically.
func (f descFields) withDecision(mode switcher.Mode, d switcher.Decision, hier bool) descFields {
	f.flags = uint8(mode) & 3
	if hier {
		f.flags |= flagHier
	}
	if d.Zcoll {
		f.flags |= flagZcoll
	}
	if d.Coded {
		f.flags |= flagCoded | uint8(d.Kind&3)<<4
	}
	return f
}

func sizesHash(op *Op, bufs [][]byte) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, x := range bufs {
		binary.LittleEndian.PutUint64(b[:], uint64(op.numel(x)))
		h.Write(b[:])
	}
	return h.Sum64() | 1 // never 0, which means "no layout"
}

// describe builds the descriptor of a collective op: what must be equal on
// every rank. Per-pair lengths (all_to_all) are checked message by message.
func describe(op *Op, rank int) descFields {
	f := descFields{kind: op.Kind, dt: op.DType, redop: noReduce, root: -1}
	if f.lossy = op.policy.Coding(op.Kind); f.lossy.Mode != quant.None {
		f.minB = uint32(min(op.policy.MinBytes, math.MaxUint32))
	}
	if op.Kind.IsReduction() {
		f.redop = uint8(op.ReduceOp)
	}
	switch op.Kind {
	case opkind.AllReduce:
		f.count = uint64(op.numel(op.In[0]))
	case opkind.Broadcast:
		f.root = int32(op.Root)
		f.count = uint64(op.numel(op.In[0]))
	case opkind.Reduce:
		f.root = int32(op.Root)
		f.count = uint64(op.numel(op.In[0]))
	case opkind.AllGather:
		f.layout = sizesHash(op, op.Out)
	case opkind.ReduceScatter:
		f.layout = sizesHash(op, op.In)
	case opkind.Gather:
		f.root = int32(op.Root)
		f.count = uint64(op.numel(op.In[0]))
	case opkind.Scatter:
		f.root = int32(op.Root)
		f.count = uint64(op.numel(op.Out[0]))
	case opkind.Send, opkind.Recv:
		// Both ends of a message must agree on the dtype; the length is
		// checked against the receive buffer.
		f.kind = opkind.Send
	case opkind.AllToAll, opkind.Barrier:
	}
	if op.Kind == opkind.Barrier {
		f.dt = 0
	}
	return f
}
