package gpu

import (
	"errors"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

// lossyToOwners sums every rank's contributions to this rank's shard
// (ins[j]: this rank's contribution to rank j's shard, as x.dt) into the
// float32 accumulators at acc, with backend/lossy's toOwners' numerics.
// Without layout, its one-hop form: each rank codes its contribution to
// every other rank's shard once and sends it there. On equal hosts of
// several ranks (layout), its two stages: the ranks of each host sum their
// contributions exactly in float32, then each codes its host's partial
// sums once and sends them along its rail.
func (x *coder) lossyToOwners(ins []Buf, acc uintptr, layout [][]int) error {
	n := x.g.cfg.Size
	counts := make([]int64, n)
	for j, b := range ins {
		counts[j] = int64(b.Bytes) / x.es
	}
	if layout == nil {
		parts := make([]uintptr, n)
		for j, b := range ins {
			parts[j] = b.Ptr
		}
		return x.codedToOwners(everyRank(n), x.g.cfg.Rank, parts, x.dt, counts, acc)
	}
	// The policy and the shapes are checked before the exact stage moves
	// anything (the coded stage's header comes too late for that): ranks
	// that disagree fail here, on every rank, rather than in mismatched
	// sends.
	if err := x.checkPolicy(counts); err != nil {
		return err
	}
	host, local := hosts.Where(layout, x.g.cfg.Rank)
	sums, err := x.hostSums(ins, counts, layout, host, local)
	if err != nil {
		return err
	}
	return x.codedToOwners(hosts.Rail(layout, local), host, sums, dtype.Float32, counts, acc)
}

// checkPolicy all-gathers a header without exact lengths and checks it.
func (x *coder) checkPolicy(counts []int64) error {
	var total int64
	for _, c := range counts {
		total += c
	}
	head, err1 := x.buf(sLens, lossyHeadLen(0))
	heads, err2 := x.buf(sLensAll, int64(x.g.cfg.Size)*lossyHeadLen(0))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	words, err := x.lossyHead(head, total, 0)
	if err != nil {
		return err
	}
	_, err = x.lossyHeaders(head, heads, words, 0)
	return err
}

// hostSums is the exact stage on hosts: local rank l of each host receives
// from the host's other ranks their contributions to the shards of rail l
// (local index l on every host), host by host, as they are, and sums them
// with its own in float32 in local-rank order. It returns the sums, one per
// host in host order (counts[layout[h][local]] float32 each).
func (x *coder) hostSums(ins []Buf, counts []int64, layout [][]int, host, local int) ([]uintptr, error) {
	mine := layout[host]
	railOf := func(l int) (total int64) { // elements of rail l's shards
		for _, ranks := range layout {
			total += counts[ranks[l]]
		}
		return total
	}
	in := railOf(local)
	packOff := make([]int64, len(mine)+1) // what this rank sends local rank l
	for l := range mine {
		packOff[l+1] = packOff[l]
		if l != local {
			packOff[l+1] += roundUp(railOf(l)*x.es, 256)
		}
	}
	pack, err1 := x.buf(sHostPack, packOff[len(mine)])
	recv, err2 := x.buf(sHostRecv, int64(len(mine))*in*x.es)
	sums, err3 := x.buf(sHostSums, 4*max(in, 1))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	for l := range mine {
		if l == local {
			continue
		}
		at := pack + uintptr(packOff[l])
		for _, ranks := range layout {
			b := ins[ranks[l]]
			if b.Bytes > 0 {
				if err := x.k.MemcpyAsync(x.dev, at, b.Ptr, int64(b.Bytes), DeviceToDevice, x.st); err != nil {
					return nil, err
				}
			}
			at += uintptr(b.Bytes)
		}
	}
	localOf := map[int]int{}
	for l, r := range mine {
		localOf[r] = l
	}
	if err := x.exchange(func(j int) (uintptr, int64, uintptr, int64) {
		l, ok := localOf[j]
		if !ok {
			return 0, 0, 0, 0
		}
		return pack + uintptr(packOff[l]), railOf(l) * x.es, recv + uintptr(int64(l)*in*x.es), in * x.es
	}, false); err != nil {
		return nil, err
	}
	out := make([]uintptr, len(layout))
	var off int64 // elements of the hosts before h
	for h, ranks := range layout {
		cnt := counts[ranks[local]]
		out[h] = sums + uintptr(4*off)
		for l := range mine {
			src := ins[ranks[local]].Ptr
			if l != local {
				src = recv + uintptr((int64(l)*in+off)*x.es)
			}
			if err := x.k.QuantAddExact(x.dev, x.dt, src, cnt, out[h], l == 0, x.st); err != nil {
				return nil, err
			}
		}
		off += cnt
	}
	return out, nil
}

// codedToOwners is the coded stage: rail is the ranks it runs on, in the
// order their parts are added (this rank at index at), and parts[i] this
// rank's part of rail[i]'s shard (counts[rail[i]] elements of dt). Each
// part but this rank's own is coded once and sent to its owner; the owner
// adds the parts in rail order in float32, its own exact.
func (x *coder) codedToOwners(rail []int, at int, parts []uintptr, dt dtype.DType, counts []int64, acc uintptr) error {
	n, me := x.g.cfg.Size, x.g.cfg.Rank
	ps := int64(dt.Size())
	var total int64
	for _, c := range counts {
		total += c
	}
	mains := make([]int64, n)
	slots := make([]int64, len(rail)+1) // this rank's messages, main then exact, back to back
	pos := make([]int, n)               // rank -> index in rail, -1 off the rail
	for j := range pos {
		pos[j] = -1
	}
	for i, r := range rail {
		l, err := x.mainLen(counts[r])
		if err != nil {
			return err
		}
		mains[r], pos[r] = l, i
		slots[i+1] = slots[i]
		if i != at {
			slots[i+1] += roundUp(l+counts[r]*ps, 256)
		}
	}
	recvSlot := roundUp(mains[me]+counts[me]*ps, 256)
	send, err1 := x.buf(sSend, slots[len(rail)])
	recv, err2 := x.buf(sRecv, int64(len(rail))*recvSlot)
	head, err3 := x.buf(sLens, lossyHeadLen(n))
	heads, err4 := x.buf(sLensAll, int64(n)*lossyHeadLen(n))
	wsE, wsELen, err5 := x.workspaces(sWsEnc, 1, maxOf(counts))
	ws, wsLen, err6 := x.workspaces(sWsRed, len(rail), counts[me])
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return err
	}
	words, err := x.lossyHead(head, total, n)
	if err != nil {
		return err
	}
	for i, r := range rail {
		if i == at {
			continue
		}
		out := send + uintptr(slots[i])
		if err := x.k.QuantEncode(x.dev, dt, x.op.Lossy.Mode, x.op.Lossy.Block, parts[i], counts[r], out,
			out+uintptr(mains[r]), counts[r]*ps, head+uintptr(8*(lossyFixed+r)), wsE, wsELen, x.st); err != nil {
			return err
		}
	}
	hs, err := x.lossyHeaders(head, heads, words, n)
	if err != nil {
		return err
	}
	if err := x.exchange(func(j int) (uintptr, int64, uintptr, int64) {
		i := pos[j]
		if i < 0 {
			return 0, 0, 0, 0
		}
		return send + uintptr(slots[i]), mains[j] + hs[me][j], recv + uintptr(int64(i)*recvSlot), mains[me] + hs[j][me]
	}, false); err != nil {
		return err
	}
	for i, r := range rail {
		if i == at {
			if err := x.k.QuantAddExact(x.dev, dt, parts[i], counts[me], acc, i == 0, x.st); err != nil {
				return err
			}
			continue
		}
		m := recv + uintptr(int64(i)*recvSlot)
		if err := x.k.QuantAccumulate(x.dev, m, mains[me], m+uintptr(mains[me]), hs[r][me], counts[me], acc, i == 0,
			ws+uintptr(int64(i)*wsLen), wsLen, x.st); err != nil {
			return err
		}
	}
	return x.checkWorkspaces(ws, wsLen, rail, at)
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
func (x *coder) lossyReduceScatter(layout [][]int) error {
	numel := int64(x.op.Out[0].Bytes) / x.es
	acc, err := x.buf(sRed, 4*max(numel, 1))
	if err != nil {
		return err
	}
	if err := x.lossyToOwners(x.op.In, acc, layout); err != nil {
		return err
	}
	return x.k.QuantFinish(x.dev, acc, numel, x.avgDivisor(), x.dt, x.op.Out[0].Ptr, x.st)
}

// lossyAllReduce is backend/lossy's two-shot: the tensor cut into one shard
// of whole units per rank, reduced to the owners, each owner's float32 sum
// (AVG's division done) coded once and gathered; every rank decodes every
// shard from the same bytes.
func (x *coder) lossyAllReduce(layout [][]int) error {
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
	if err := x.lossyToOwners(ins, acc, layout); err != nil {
		return err
	}
	if d := x.avgDivisor(); d > 1 {
		if err := x.k.QuantFinish(x.dev, acc, counts[me], d, dtype.Float32, acc, x.st); err != nil {
			return err
		}
	}
	return x.lossyGather(acc, dtype.Float32, counts, dsts)
}
