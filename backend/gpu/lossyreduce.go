package gpu

import (
	"errors"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

// lossyToOwners sums every rank's contributions to this rank's shard into
// the float32 accumulators at acc, the one-hop form of backend/lossy's
// toOwners: each rank codes its contribution to every other rank's shard
// (ins[j], x.dt) once and sends it there; the owner adds them in rank
// order in float32, its own exact.
func (x *coder) lossyToOwners(ins []Buf, acc uintptr) error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	counts := make([]int64, n)
	mains := make([]int64, n)
	slots := make([]int64, n+1) // this rank's messages, main then exact, back to back
	var total int64
	for j, b := range ins {
		counts[j] = int64(b.Bytes) / x.es
		l, err := x.mainLen(counts[j])
		if err != nil {
			return err
		}
		total += counts[j]
		mains[j] = l
		slots[j+1] = slots[j]
		if j != me {
			slots[j+1] += roundUp(l+int64(b.Bytes), 256)
		}
	}
	recvSlot := roundUp(mains[me]+int64(ins[me].Bytes), 256)
	send, err1 := x.buf(sSend, slots[n])
	recv, err2 := x.buf(sRecv, int64(n)*recvSlot)
	head, err3 := x.buf(sLens, lossyHeadLen(n))
	heads, err4 := x.buf(sLensAll, int64(n)*lossyHeadLen(n))
	wsE, wsELen, err5 := x.workspaces(sWsEnc, 1, maxOf(counts))
	ws, wsLen, err6 := x.workspaces(sWsRed, n, counts[me])
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return err
	}
	words, err := x.lossyHead(head, total)
	if err != nil {
		return err
	}
	for j := range n {
		if j == me {
			continue
		}
		out := send + uintptr(slots[j])
		if err := x.k.QuantEncode(x.dev, x.dt, x.op.Lossy.Mode, x.op.Lossy.Block, ins[j].Ptr, counts[j], out,
			out+uintptr(mains[j]), int64(ins[j].Bytes), head+uintptr(8*(lossyFixed+j)), wsE, wsELen, x.st); err != nil {
			return err
		}
	}
	hs, err := x.lossyHeaders(head, heads, words, n)
	if err != nil {
		return err
	}
	if err := x.exchange(func(j int) (uintptr, int64, uintptr, int64) {
		return send + uintptr(slots[j]), mains[j] + hs[me][j], recv + uintptr(int64(j)*recvSlot), mains[me] + hs[j][me]
	}, false); err != nil {
		return err
	}
	for j := range n {
		if j == me {
			if err := x.k.QuantAddExact(x.dev, x.dt, ins[me].Ptr, counts[me], acc, j == 0, x.st); err != nil {
				return err
			}
			continue
		}
		m := recv + uintptr(int64(j)*recvSlot)
		if err := x.k.QuantAccumulate(x.dev, m, mains[me], m+uintptr(mains[me]), hs[j][me], counts[me], acc, j == 0,
			ws+uintptr(int64(j)*wsLen), wsLen, x.st); err != nil {
			return err
		}
	}
	return x.checkWorkspaces(ws, wsLen, n, me)
}

// avgDivisor is what an AVG divides the float32 sum by (1: SUM).
func (x *coder) avgDivisor() int {
	if x.op.ReduceOp == reduce.Avg {
		return x.g.cfg.Size
	}
	return 1
}

// lossyReduceScatter: the reduction to owners, then the owner's sum
// divided (AVG) and rounded once into Out[0].
func (x *coder) lossyReduceScatter() error {
	numel := int64(x.op.Out[0].Bytes) / x.es
	acc, err := x.buf(sRed, 4*max(numel, 1))
	if err != nil {
		return err
	}
	if err := x.lossyToOwners(x.op.In, acc); err != nil {
		return err
	}
	return x.k.QuantFinish(x.dev, acc, numel, x.avgDivisor(), x.dt, x.op.Out[0].Ptr, x.st)
}

// lossyAllReduce is backend/lossy's two-shot: the tensor cut into one shard
// of whole units per rank, reduced to the owners, each owner's float32 sum
// (AVG's division done) coded once and gathered; every rank decodes every
// shard from the same bytes.
func (x *coder) lossyAllReduce() error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	numel := int64(x.op.In[0].Bytes) / x.es
	nb := int64(quant.Blocks(int(numel), lossy.Unit))
	ins := make([]Buf, n)
	counts := make([]int64, n)
	dsts := make([]uintptr, n)
	for j := range n {
		lo := min(numel, nb*int64(j)/int64(n)*lossy.Unit)
		hi := min(numel, nb*int64(j+1)/int64(n)*lossy.Unit)
		ins[j] = Buf{Ptr: x.op.In[0].Ptr + uintptr(lo*x.es), Bytes: int((hi - lo) * x.es)}
		counts[j] = hi - lo
		dsts[j] = x.op.Out[0].Ptr + uintptr(lo*x.es)
	}
	acc, err := x.buf(sMine, 4*max(counts[me], 1))
	if err != nil {
		return err
	}
	if err := x.lossyToOwners(ins, acc); err != nil {
		return err
	}
	if d := x.avgDivisor(); d > 1 {
		if err := x.k.QuantFinish(x.dev, acc, counts[me], d, dtype.Float32, acc, x.st); err != nil {
			return err
		}
	}
	return x.lossyGather(acc, dtype.Float32, counts, dsts)
}
