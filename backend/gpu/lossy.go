package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
)

// The lossy GPU path: an op the group's lossy policy codes, on CUDA
// tensors, is quantized by the kernel library (cuda/zc_quant.cu, the bytes
// package quant writes) and its messages move through NCCL. Each rank codes
// its shard once and every rank, this one included, decodes every shard
// from the same bytes, so the outputs are bitwise identical on every rank
// and equal to the host path's (backend/lossy), whose shards are the same
// blocks.
//
// The policy is checked before any payload moves: every rank all-gathers a
// small header (mode, block size, element count, its exact part's length)
// and compares it with its own, so ranks that disagree fail on every rank,
// naming both policies. A rank whose policy makes the op exact calls plain
// NCCL instead, and the op then ends at its timeout, as NCCL's own
// mismatched calls do.

// mismatchError: the ranks disagree about the op (its lossy coding).
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }

// lossyOnGPU says why op, which the policy codes, cannot run lossy on the
// GPU ("" when it can).
func lossyOnGPU(op *Op) string {
	switch op.Kind {
	case opkind.AllGather:
		for _, b := range op.Out {
			if b.Bytes != op.In[0].Bytes {
				return "its shards differ in size"
			}
		}
		return ""
	case opkind.ReduceScatter, opkind.AllReduce:
		return ""
	}
	return fmt.Sprintf("no lossy GPU algorithm for %s", op.Kind)
}

// runLossy runs op lossily through NCCL (the plan was PathNCCL). layout:
// the group's ranks by host when they span equal hosts of several ranks
// (the reductions then sum exactly inside each host first), else nil.
func (g *Group) runLossy(op *Op, c ncclComm, deadline time.Time, layout [][]int) error {
	return g.runOnDevice(op, c, deadline, "lossy", func(x *coder) error {
		switch op.Kind {
		case opkind.AllGather:
			return x.lossyAllGather()
		case opkind.ReduceScatter:
			return x.lossyReduceScatter(layout)
		case opkind.AllReduce:
			return x.lossyAllReduce(layout)
		}
		return fmt.Errorf("no lossy GPU algorithm for %v", op.Kind)
	})
}

// The header each rank all-gathers before a lossy step's payload, as
// little-endian int64: magic, mode, block size, the elements of the whole
// op (the same on every rank), then the lengths of the exact parts this
// rank sends (one per message; the encoder writes them).
const (
	lossyMagic = 0x7a63_6c6f_7373_7901 // "zclossy", 1
	lossyFixed = 4
)

// lossyHeadLen is a header's bytes with k exact lengths.
func lossyHeadLen(k int) int64 { return int64(8 * (lossyFixed + k)) }

// lossyHeaders all-gathers this rank's header (at head, lossyFixed words
// then k exact lengths) into heads, waits for it, checks every rank's
// fixed words against this rank's and returns every rank's exact lengths.
func (x *coder) lossyHeaders(head, heads uintptr, words []int64, k int) ([][]int64, error) {
	n := x.g.cfg.Size
	hl := int(lossyHeadLen(k))
	if err := x.c.AllGather(head, heads, hl, ncclUint8, x.st); err != nil {
		return nil, err
	}
	x.wire += int64(hl * (n - 1))
	if err := x.settle(); err != nil {
		return nil, err
	}
	if err := x.k.Sync(x.dev, x.st); err != nil {
		return nil, err
	}
	raw := make([]byte, n*hl)
	if err := x.k.CopyToHost(x.dev, raw, heads); err != nil {
		return nil, err
	}
	out := make([][]int64, n)
	for j := range out {
		w := make([]int64, lossyFixed+k)
		for i := range w {
			w[i] = int64(binary.LittleEndian.Uint64(raw[j*hl+8*i:]))
		}
		if w[0] != lossyMagic {
			return nil, &mismatchError{fmt.Sprintf("ranks disagree on the operation: rank %d sent no lossy header (is its lossy policy this rank's?)", j)}
		}
		for i := 1; i < lossyFixed; i++ {
			if w[i] != words[i] {
				return nil, &mismatchError{fmt.Sprintf("ranks disagree on the lossy policy: rank %d codes %s, rank %d codes %s",
					x.g.cfg.Rank, describeLossy(words), j, describeLossy(w))}
			}
		}
		out[j] = w[lossyFixed:]
	}
	return out, nil
}

func describeLossy(w []int64) string {
	return fmt.Sprintf("%v (block %d) over %d elements", quant.Mode(w[1]), w[2], w[3])
}

// lossyHead writes this rank's header: its fixed words, then k exact
// lengths set to 0 (the encoder writes those of the messages it sends),
// and returns the fixed words.
func (x *coder) lossyHead(head uintptr, total int64, k int) ([]int64, error) {
	words := []int64{lossyMagic, int64(x.op.Lossy.Mode), int64(x.op.Lossy.Block), total}
	raw := make([]byte, lossyHeadLen(k))
	for i, v := range words {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(v))
	}
	return words, x.k.CopyFromHost(x.dev, head, raw)
}

// mainLen is the main part of a message of numel elements under the op's
// coding.
func (x *coder) mainLen(numel int64) (int64, error) {
	code := x.op.Lossy
	l := x.k.QuantMainLen(code.Mode, numel, code.Block)
	if l < 0 {
		return 0, fmt.Errorf("the kernel library refuses %v for %d elements", code, numel)
	}
	return l, nil
}

// workspaces returns k quant workspaces for up to numel elements, each
// wsLen bytes apart: a call clears its own status, so each message whose
// status is read afterwards needs its own.
func (x *coder) workspaces(slot int, k int, numel int64) (uintptr, int64, error) {
	wsLen := roundUp(x.k.QuantWorkspace(numel), 256)
	ws, err := x.buf(slot, int64(k)*wsLen)
	return ws, wsLen, err
}

// checkWorkspaces synchronizes the stream and returns the first data error
// recorded in workspace i, which decoded rank ranks[i]'s message (i = skip:
// none).
func (x *coder) checkWorkspaces(ws uintptr, wsLen int64, ranks []int, skip int) error {
	if err := x.settle(); err != nil {
		return err
	}
	for i, r := range ranks {
		if i == skip {
			continue
		}
		if err := x.k.WorkspaceStatus(x.dev, ws+uintptr(int64(i)*wsLen), x.st); err != nil {
			return fmt.Errorf("rank %d's message: %w", r, err)
		}
	}
	return nil
}

// everyRank is 0..n-1.
func everyRank(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// lossyGather codes count elements of dt at src once and decodes every
// rank's message (counts[j] elements) into dsts[j] as x.dt: the main
// parts, padded to the longest, in one all-gather; the exact parts, padded
// likewise, in a second only when some rank has one.
func (x *coder) lossyGather(src uintptr, dt dtype.DType, counts []int64, dsts []uintptr) error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	mains := make([]int64, n)
	var total, slot, most int64
	for j, c := range counts {
		l, err := x.mainLen(c)
		if err != nil {
			return err
		}
		mains[j] = l
		total += c
		slot, most = max(slot, l), max(most, c)
	}
	exactCap := max(counts[me]*int64(dt.Size()), 1)
	gathered, err1 := x.buf(sGather, int64(n)*slot)
	exact, err2 := x.buf(sSend, exactCap)
	head, err3 := x.buf(sLens, lossyHeadLen(1))
	heads, err4 := x.buf(sLensAll, int64(n)*lossyHeadLen(1))
	ws, wsLen, err5 := x.workspaces(sWsDec, n, most)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return err
	}
	words, err := x.lossyHead(head, total, 1)
	if err != nil {
		return err
	}
	at := gathered + uintptr(int64(me)*slot)
	if err := x.k.QuantEncode(x.dev, dt, x.op.Lossy.Mode, x.op.Lossy.Block, src, counts[me], at, exact, exactCap,
		head+8*lossyFixed, ws, wsLen, x.st); err != nil {
		return err
	}
	hs, err := x.lossyHeaders(head, heads, words, 1)
	if err != nil {
		return err
	}
	if err := x.c.AllGather(at, gathered, int(slot), ncclUint8, x.st); err != nil {
		return err
	}
	x.wire += mains[me] * int64(n-1)
	var longest int64
	for _, h := range hs {
		longest = max(longest, h[0])
	}
	var exacts uintptr
	if longest > 0 {
		if exacts, err = x.buf(sRecv, int64(n)*longest); err != nil {
			return err
		}
		at := exacts + uintptr(int64(me)*longest)
		if err := x.k.MemcpyAsync(x.dev, at, exact, hs[me][0], DeviceToDevice, x.st); err != nil {
			return err
		}
		if err := x.c.AllGather(at, exacts, int(longest), ncclUint8, x.st); err != nil {
			return err
		}
		x.wire += hs[me][0] * int64(n-1)
	}
	for j := range n {
		var ex uintptr
		if hs[j][0] > 0 {
			ex = exacts + uintptr(int64(j)*longest)
		}
		if err := x.k.QuantDecode(x.dev, gathered+uintptr(int64(j)*slot), mains[j], ex, hs[j][0], x.dt, counts[j], dsts[j],
			ws+uintptr(int64(j)*wsLen), wsLen, x.st); err != nil {
			return err
		}
	}
	return x.checkWorkspaces(ws, wsLen, everyRank(n), -1)
}

// lossyAllGather: this rank's shard coded once, every shard decoded on
// every rank from the same bytes.
func (x *coder) lossyAllGather() error {
	n := x.g.cfg.Size
	counts := make([]int64, n)
	dsts := make([]uintptr, n)
	for j := range n {
		counts[j] = int64(x.op.In[0].Bytes) / x.es
		dsts[j] = x.op.Out[j].Ptr
	}
	return x.lossyGather(x.op.In[0].Ptr, x.dt, counts, dsts)
}
