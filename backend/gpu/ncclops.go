package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/rendezvous"
)

// A group's NCCL communicators (the group's, and one per point-to-point
// pair), and the uncoded ops the NCCL path enqueues on them.

func (g *Group) commOrder(op *Op) int {
	if !op.Kind.IsP2P() {
		return -1
	}
	lo, hi := min(g.cfg.Rank, op.Root), max(g.cfg.Rank, op.Root)
	return lo*g.cfg.Size + hi
}

// commFor returns op's communicator, creating it on first use: the group's
// for collectives, a two-rank one per pair for point-to-point ops (as
// ProcessGroupNCCL does, so that a send does not need every rank).
func (g *Group) commFor(op *Op, deadline time.Time) (ncclComm, error) {
	if !op.Kind.IsP2P() {
		if g.comm == nil {
			c, err := g.initComm(op, g.key("nccl", "coll"), g.cfg.Size, g.cfg.Rank, deadline)
			if err != nil {
				return nil, g.initFailed(err)
			}
			g.comm = c
		}
		return g.comm, nil
	}
	if c := g.pairs[op.Root]; c != nil {
		return c, nil
	}
	lo, hi := min(g.cfg.Rank, op.Root), max(g.cfg.Rank, op.Root)
	me := 0
	if g.cfg.Rank == hi {
		me = 1
	}
	c, err := g.initComm(op, g.key("nccl", "p2p", strconv.Itoa(lo)+"-"+strconv.Itoa(hi)), 2, me, deadline)
	if err != nil {
		return nil, g.initFailed(err)
	}
	g.pairs[op.Root] = c
	return c, nil
}

// initFailed makes a failed communicator setup final: a retry would reuse
// its store key, where the ranks could read unique ids of different tries
// and wait on each other until the timeout. The group stays unusable, as
// ProcessGroupNCCL's does after a failed init.
func (g *Group) initFailed(err error) error {
	g.breakDevice(err, nil)
	return err
}

// peerIndex is op's peer in its communicator.
func (g *Group) peerIndex(op *Op) int {
	if g.cfg.Rank < op.Root {
		return 1
	}
	return 0
}

// initComm creates an NCCL communicator of n ranks, this one being me: the
// rank 0 of it draws the unique id and publishes it under key; the others
// fetch it.
func (g *Group) initComm(op *Op, key string, n, me int, deadline time.Time) (ncclComm, error) {
	lib, err := g.env.NCCL()
	if err != nil {
		return nil, g.fail(CodeComm, op, "%v", err)
	}
	id, err := exchangeID(g.cfg.Ctx, g.cfg.Store, lib, key, me, deadline)
	if err != nil {
		return nil, g.fail(codeFor(err), op, "setting up the NCCL communicator: %v", err)
	}
	start := time.Now()
	c, err := lib.InitRank(n, id, me)
	if err != nil {
		return nil, g.fail(CodeComm, op, "creating the NCCL communicator: %v", err)
	}
	if err := c.Settle(deadline); err != nil {
		c.Abort()
		if errors.Is(err, errSettleTimeout) {
			return nil, g.fail(CodeTimeout, op, "creating the NCCL communicator (%d ranks) timed out after %v; was it aborted elsewhere, or does a rank never reach its first CUDA op?", n, time.Since(start).Round(time.Millisecond))
		}
		return nil, g.fail(CodeComm, op, "creating the NCCL communicator: %v", err)
	}
	g.cmu.Lock()
	g.comms = append(g.comms, c)
	g.cmu.Unlock()
	g.log.Infof("NCCL communicator %s: %d ranks on cuda:%d, created in %v", key, n, g.device, time.Since(start).Round(time.Millisecond))
	return c, nil
}

// exchangeID is the unique-id exchange through the store: rank 0 of the
// communicator calls ncclGetUniqueId and publishes it; the others wait for
// it (until deadline).
func exchangeID(parent context.Context, store rendezvous.Store, lib ncclLib, key string, me int, deadline time.Time) (UniqueID, error) {
	var id UniqueID
	if me == 0 {
		id, err := lib.UniqueID()
		if err != nil {
			return id, err
		}
		if err := store.Set(key, id[:]); err != nil {
			return id, fmt.Errorf("publishing the NCCL unique id: %w", err)
		}
		return id, nil
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	b, err := store.Get(ctx, key)
	if err != nil {
		return id, fmt.Errorf("waiting for the NCCL unique id from the communicator's first rank: %w", err)
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("the NCCL unique id under %q has %d bytes, want %d", key, len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}

// prepared is the per-op state enqueue needs: its NCCL types and, for
// PREMUL_SUM, the op it created.
type prepared struct {
	op     *Op
	comm   ncclComm
	dt     ncclDataType
	redop  ncclRedOp
	premul bool
}

func premulScalar(dt dtype.DType, f float64) []byte {
	switch dt {
	case dtype.Float64:
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))
	case dtype.Float32:
		return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(f)))
	case dtype.Float16:
		return binary.LittleEndian.AppendUint16(nil, dtype.F32ToF16(float32(f)))
	case dtype.BFloat16:
		return binary.LittleEndian.AppendUint16(nil, dtype.F32ToBF16(float32(f)))
	}
	return nil
}

// enqueue issues ops (uncoded) and waits until NCCL has put them on their
// streams. Several ops, or one made of several NCCL calls, go in one NCCL
// group.
func (g *Group) enqueue(ops []*Op, deadline time.Time) (err error) {
	lib, err := g.env.NCCL()
	if err != nil {
		return g.fail(CodeComm, ops[0], "%v", err)
	}
	preps := make([]*prepared, len(ops))
	defer func() {
		for _, p := range preps {
			if p != nil && p.premul {
				p.comm.DestroyOp(p.redop)
			}
		}
	}()
	grouped := len(ops) > 1
	for i, op := range ops {
		c, err := g.commFor(op, deadline)
		if err != nil {
			return err
		}
		p := &prepared{op: op, comm: c, dt: ncclUint8}
		if op.Kind.IsReduction() {
			var why string
			p.dt, p.redop, p.premul, why = ncclReduction(op.DType, op.ReduceOp, lib.Version())
			if why != "" {
				return g.fail(CodeInvalid, op, "%s", why)
			}
			if p.premul {
				r, err := c.PreMulSum(premulScalar(op.DType, op.PreMul), p.dt)
				if err != nil {
					return g.breakOn(op, err)
				}
				p.redop = r
			}
		}
		preps[i] = p
		grouped = grouped || g.calls(op) > 1
	}
	if grouped {
		if err := lib.GroupStart(); err != nil {
			return g.breakOn(ops[0], err)
		}
	}
	var first error
	var culprit *Op
	for _, p := range preps {
		if err := g.issue(p); err != nil && first == nil {
			first, culprit = err, p.op
		}
	}
	if grouped {
		if err := lib.GroupEnd(); err != nil && first == nil {
			first, culprit = err, ops[0]
		}
	}
	if first != nil {
		return g.breakOn(culprit, first)
	}
	settled := map[ncclComm]bool{}
	for _, p := range preps {
		if settled[p.comm] {
			continue
		}
		settled[p.comm] = true
		if err := p.comm.Settle(deadline); err != nil {
			return g.breakOn(p.op, err)
		}
	}
	return nil
}

// breakOn turns an NCCL failure while enqueueing into op's error, and makes
// the group unusable (the communicators' state is unknown).
func (g *Group) breakOn(op *Op, err error) error {
	e := g.fail(codeFor(err), op, "%v", err)
	g.breakDevice(fmt.Errorf("%s on rank %d failed: %v", op.Label, g.cfg.Rank, err), nil)
	return e
}

// contiguous reports whether bufs lie back to back, each of n bytes.
func contiguous(bufs []Buf, n int) bool {
	for i, b := range bufs {
		if b.Bytes != n || (n > 0 && b.Ptr != bufs[0].Ptr+uintptr(i*n)) {
			return false
		}
	}
	return true
}

// calls is how many NCCL calls issue makes for op.
func (g *Group) calls(op *Op) int {
	switch op.Kind {
	case opkind.AllGather:
		if contiguous(op.Out, op.In[0].Bytes) {
			return 1
		}
		return g.cfg.Size
	case opkind.ReduceScatter:
		if contiguous(op.In, op.Out[0].Bytes) {
			return 1
		}
		return g.cfg.Size
	case opkind.AllToAll, opkind.Gather, opkind.Scatter:
		return 2 * g.cfg.Size
	}
	return 1
}

// issue makes op's NCCL calls (inside a group when there are several).
func (g *Group) issue(p *prepared) error {
	op, c := p.op, p.comm
	st := op.Stream
	me, n := g.cfg.Rank, g.cfg.Size
	es := max(op.DType.Size(), 1)
	switch op.Kind {
	case opkind.AllReduce:
		return c.AllReduce(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes/es, p.dt, p.redop, st)
	case opkind.Broadcast:
		return c.Broadcast(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes, ncclUint8, op.Root, st)
	case opkind.Reduce:
		return c.Reduce(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes/es, p.dt, p.redop, op.Root, st)
	case opkind.AllGather:
		if contiguous(op.Out, op.In[0].Bytes) {
			if op.In[0].Bytes == 0 {
				return nil
			}
			return c.AllGather(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes, ncclUint8, st)
		}
		// Tensors of their own (or of different sizes): one broadcast
		// per root.
		for r := 0; r < n; r++ {
			src := op.Out[r].Ptr
			if r == me {
				src = op.In[0].Ptr
			}
			if op.Out[r].Bytes == 0 {
				continue
			}
			if err := c.Broadcast(src, op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
				return err
			}
		}
		return nil
	case opkind.ReduceScatter:
		count := op.Out[0].Bytes / es
		if contiguous(op.In, op.Out[0].Bytes) {
			return c.ReduceScatter(op.In[0].Ptr, op.Out[0].Ptr, count, p.dt, p.redop, st)
		}
		for r := 0; r < n; r++ {
			if err := c.Reduce(op.In[r].Ptr, op.Out[0].Ptr, count, p.dt, p.redop, r, st); err != nil {
				return err
			}
		}
		return nil
	case opkind.AllToAll:
		for r := 0; r < n; r++ {
			if op.In[r].Bytes > 0 {
				if err := c.Send(op.In[r].Ptr, op.In[r].Bytes, ncclUint8, r, st); err != nil {
					return err
				}
			}
			if op.Out[r].Bytes > 0 {
				if err := c.Recv(op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
					return err
				}
			}
		}
		return nil
	case opkind.Gather:
		if op.In[0].Bytes > 0 {
			if err := c.Send(op.In[0].Ptr, op.In[0].Bytes, ncclUint8, op.Root, st); err != nil {
				return err
			}
		}
		if me == op.Root {
			for r := 0; r < n; r++ {
				if op.Out[r].Bytes > 0 {
					if err := c.Recv(op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
						return err
					}
				}
			}
		}
		return nil
	case opkind.Scatter:
		if me == op.Root {
			for r := 0; r < n; r++ {
				if op.In[r].Bytes > 0 {
					if err := c.Send(op.In[r].Ptr, op.In[r].Bytes, ncclUint8, r, st); err != nil {
						return err
					}
				}
			}
		}
		if op.Out[0].Bytes > 0 {
			return c.Recv(op.Out[0].Ptr, op.Out[0].Bytes, ncclUint8, op.Root, st)
		}
		return nil
	case opkind.Send:
		if op.In[0].Bytes == 0 {
			return nil
		}
		return c.Send(op.In[0].Ptr, op.In[0].Bytes, ncclUint8, g.peerIndex(op), st)
	case opkind.Recv:
		if op.Out[0].Bytes == 0 {
			return nil
		}
		return c.Recv(op.Out[0].Ptr, op.Out[0].Bytes, ncclUint8, g.peerIndex(op), st)
	}
	return fmt.Errorf("no NCCL mapping for %v", op.Kind)
}
