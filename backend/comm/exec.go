package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/transport"
)

// opConn is a collective op's view of the mesh (collective.Conn): every
// message carries the op's sequence number and descriptor, and every
// incoming one must carry the same.
type opConn struct {
	c    *Comm
	t    *task
	seq  uint64
	desc transport.Desc
}

func (o *opConn) Rank() int { return o.c.cfg.Rank }
func (o *opConn) Size() int { return o.c.cfg.Size }

func (o *opConn) Send(ctx context.Context, peer int, slot uint32, bufs ...[]byte) error {
	if err := o.c.mesh.Send(ctx, peer, transport.Key{Kind: transport.Coll, Seq: o.seq, Slot: slot}, &o.desc, bufs...); err != nil {
		return &peerOpError{peer: peer, send: true, err: err}
	}
	o.t.wire.Add(byteLen(bufs))
	return nil
}

func (o *opConn) Recv(ctx context.Context, peer int, slot uint32, buf []byte) error {
	_, err := o.c.mesh.Recv(ctx, peer, transport.Key{Kind: transport.Coll, Seq: o.seq, Slot: slot}, buf, &o.desc)
	if err != nil {
		return &peerOpError{peer: peer, err: err}
	}
	return nil
}

func (o *opConn) RecvUpTo(ctx context.Context, peer int, slot uint32, buf []byte) (int, error) {
	pd := o.c.mesh.PostUpTo(peer, transport.Key{Kind: transport.Coll, Seq: o.seq, Slot: slot}, buf, &o.desc)
	if _, err := pd.Wait(ctx); err != nil {
		return 0, &peerOpError{peer: peer, err: err}
	}
	return pd.Len(), nil
}

// peerOpError remembers which peer an op was talking to when it failed.
type peerOpError struct {
	peer int
	send bool
	err  error
}

func (e *peerOpError) Error() string {
	if e.send {
		return fmt.Sprintf("sending to rank %d: %v", e.peer, e.err)
	}
	return fmt.Sprintf("receiving from rank %d: %v", e.peer, e.err)
}

func (e *peerOpError) Unwrap() error { return e.err }

// runCollective runs one collective: the agreement check and the data
// movement run concurrently under the op's deadline, except where the
// decision needs the check's outcome first (a probing op, an all_to_all
// that could be coded).
func (c *Comm) runCollective(t *task) error {
	op := t.op
	fields := describe(op, c.cfg.Rank)
	timeout := c.Timeout()
	if op.Timeout > 0 {
		timeout = time.Duration(op.Timeout) * time.Millisecond
	}
	ctx, cancel := context.WithTimeoutCause(c.ctx, timeout, &timeoutError{after: timeout.String()})
	defer cancel()

	if op.Dev != nil {
		if err := c.readyDevice(ctx, t, true); err != nil {
			return c.collErr(t, fields, err)
		}
	}
	if c.cfg.Size == 1 {
		if op.Dev != nil {
			return c.collErr(t, fields, c.staged(t, runLocal))
		}
		return c.collErr(t, fields, runLocal(op))
	}
	tele := c.estimate(t)
	tele.where = c.where()
	prev := c.takeLast()
	if prev.keyed {
		tele.prev = prev.sec
	}
	size := payload(op)
	tele.size = float64(size)
	conn := &opConn{c: c, t: t, seq: t.seq}
	var err error
	if t.hosts, err = c.hierarchy(ctx, op); err != nil {
		return c.collErr(t, fields, err)
	}
	if c.agreeSizeFirst(op) || c.wantsProbe(op, size) {
		// The check runs first, on its own: before the first op that
		// could be coded measures the group (it must not start probing
		// before knowing every rank called the same op), and before an
		// all_to_all, whose ranks must decide on the same size.
		conn.desc = fields.withDecision(c.z.mode, switcher.Decision{}, t.hosts != nil).encode()
		agreed, err := c.agree(ctx, conn, tele)
		if err != nil {
			return c.collErr(t, fields, err)
		}
		c.learn(op, prev, agreed)
		size = int(agreed.size)
		probed := c.wantsProbe(op, size)
		if probed {
			if err := c.probe(ctx, conn, t); err != nil {
				return c.collErr(t, fields, err)
			}
		}
		c.fb.Commit(c.decide(op, t, size)) // the op is agreed already
		fields = fields.withDecision(c.z.mode, t.decision, t.hosts != nil)
		conn.desc = fields.encode()
		start := time.Now()
		dataErr := c.runAlgorithm(ctx, conn, op, t)
		if !probed { // a probing call's time is not the path's
			c.timed(t, start, dataErr)
		}
		if op.Kind == opkind.AllToAll {
			dataErr = c.splitStatus(ctx, conn, fields, dataErr)
		}
		return c.collErr(t, fields, dataErr)
	}
	decideOn, agreed := c.sizeOf(op, size)
	step := c.decide(op, t, decideOn)
	if agreed && decideOn != size {
		t.decision.Why = fmt.Sprintf("decided on the last all_to_all's largest payload (%d bytes): %s", decideOn, t.decision.Why)
	}
	fields = fields.withDecision(c.z.mode, t.decision, t.hosts != nil)
	conn.desc = fields.encode()
	dataCtx, dataCancel := context.WithCancelCause(ctx)
	defer dataCancel(nil)
	type checked struct {
		tele telemetry
		err  error
	}
	check := make(chan checked, 1)
	go func() {
		agreed, err := c.agree(ctx, conn, tele)
		if err != nil {
			dataCancel(err)
		}
		check <- checked{agreed, err}
	}()
	var dataErr error
	if op.Kind != opkind.Barrier {
		start := time.Now()
		dataErr = c.runAlgorithm(dataCtx, conn, op, t)
		c.timed(t, start, dataErr)
	}
	res := <-check
	if res.err != nil {
		// Not agreed (ranks may have timed different ops): forget it.
		c.last = lastCall{}
	} else {
		c.learn(op, prev, res.tele)
		if op.Kind == opkind.AllToAll && (!agreed || int(res.tele.size) != decideOn) {
			// decided on this rank's own size (uncoded at every size, see
			// agreeSizeFirst: not a key the group shares), or on the last
			// call's size while it was another: its time says nothing of
			// the calls under that key (the same outcome on every rank, as
			// the size is agreed)
			c.last.keyed = false
		} else {
			c.fb.Commit(step)
		}
		if op.Kind == opkind.AllToAll {
			dataErr = c.splitStatus(ctx, conn, fields, dataErr)
		}
	}
	var mm *mismatchError
	switch {
	case errors.As(res.err, &mm):
		return c.collErr(t, fields, res.err)
	case dataErr != nil:
		return c.collErr(t, fields, dataErr)
	default:
		return c.collErr(t, fields, res.err)
	}
}

func (c *Comm) collErr(t *task, fields descFields, err error) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("zipccl: %s #%d on rank %d of group %q", fields, t.seq, c.cfg.Rank, c.cfg.Name)
	return c.wrapErr(what, fields, err)
}

// wrapErr turns a failure into the message the user sees, prefixed by what
// (the op and where it ran), and breaks the group when the failure leaves
// the connections in an unknown state.
func (c *Comm) wrapErr(what string, fields descFields, err error) error {
	var (
		mm  *mismatchError
		tme *transport.MismatchError
		to  *timeoutError
		br  *brokenError
		ce  *Error
	)
	switch {
	case errors.As(err, &ce):
		return err
	case errors.As(err, &mm):
		return &Error{Code: CodeMismatch, Msg: what + " failed: " + mm.msg}
	case errors.As(err, &tme):
		return &Error{Code: CodeMismatch, Msg: what + " failed: " + c.describeMismatch(fields, tme)}
	case errors.As(err, &br):
		return &Error{Code: CodeComm, Msg: what + " failed: " + br.reason}
	case errors.As(err, &to):
		msg := what + " failed: " + err.Error()
		if r := c.mesh.Refusals(); r != "" && !strings.Contains(msg, r) {
			// a rank set up differently was refused: the likely cause
			msg += "; " + r
		}
		reason := fmt.Sprintf("%s reached its timeout on rank %d", fields.kind, c.cfg.Rank)
		if c.breakGroup(errors.New(reason)) && c.mesh != nil {
			go c.mesh.SendAbort(reason)
		}
		if c.cfg.Store != nil && c.cfg.Size > 1 {
			rctx, rcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			if rep := rendezvous.AbortReport(rctx, c.cfg.Store); rep != "" {
				msg += "; the group reports: " + rep
			}
			rcancel()
		}
		return &Error{Code: CodeTimeout, Msg: msg}
	}
	var pe *transport.PeerError
	if errors.As(err, &pe) && pe.Remote {
		c.peerLost(pe.Rank, pe)
	}
	return &Error{Code: CodeComm, Msg: what + " failed: " + err.Error()}
}

func (c *Comm) describeMismatch(mine descFields, e *transport.MismatchError) string {
	if e.Want != e.Got {
		return fmt.Sprintf("rank %d called %s while rank %d called %s", e.Peer, decodeDesc(e.Got), c.cfg.Rank, mine)
	}
	return fmt.Sprintf("rank %d sent %d bytes where rank %d expected %d bytes", e.Peer, e.GotLen, c.cfg.Rank, e.WantLen)
}

// runLocal is every collective on a group of one: copies only.
func runLocal(op *Op) error {
	switch op.Kind {
	case opkind.AllReduce, opkind.Broadcast, opkind.Barrier:
		if op.Kind == opkind.AllReduce && op.ReduceOp == reduce.PreMulSum {
			reduce.Scale(op.DType, op.Out[0], op.PreMul)
		}
	case opkind.Reduce, opkind.AllGather, opkind.AllToAll, opkind.Gather, opkind.Scatter:
		copy(op.Out[0], op.In[0])
		if op.Kind == opkind.Reduce && op.ReduceOp == reduce.PreMulSum {
			reduce.Scale(op.DType, op.Out[0], op.PreMul)
		}
	case opkind.ReduceScatter:
		copy(op.Out[0], op.In[0])
		if op.ReduceOp == reduce.PreMulSum {
			reduce.Scale(op.DType, op.Out[0], op.PreMul)
		}
	}
	return nil
}

// runAlgorithm maps an op to its algorithm, resolving AVG (sum, then divide
// on the final values) and PREMUL_SUM (scale a private copy of the input,
// then sum) so the algorithms only see plain reductions.
func (c *Comm) runAlgorithm(ctx context.Context, conn *opConn, op *Op, t *task) error {
	if op.Dev != nil {
		return c.runDevice(ctx, conn, op, t)
	}
	// Local is measured and folded with the link profile, so all ranks see
	// the same value (before the group has measured itself: false).
	a := collective.Args{DType: op.DType, Op: op.ReduceOp, Root: op.Root, In: op.In, Out: op.Out, Pool: c.pool,
		Local: c.z.local}
	switch op.ReduceOp {
	case reduce.Avg:
		a.Op = reduce.Sum
	case reduce.PreMulSum:
		a.Op = reduce.Sum
		if op.Kind.IsReduction() {
			a.In = c.premultiplied(op)
			defer c.releaseScaled(op, a.In)
		}
	}
	var err error
	if op.lossy.Mode != quant.None {
		avg := 1
		if op.ReduceOp == reduce.Avg {
			avg = c.cfg.Size
		}
		return runLossy(ctx, conn, op, a, t.hosts, avg)
	} else if t.decision.Zcoll || t.hosts != nil {
		err = c.runZcoll(ctx, conn, op, a, t, nil)
	} else {
		err = runPlain(ctx, conn, op, a)
	}
	if err != nil || op.ReduceOp != reduce.Avg || !op.Kind.IsReduction() {
		return err
	}
	if op.Kind != opkind.Reduce || c.cfg.Rank == op.Root {
		reduce.Average(op.DType, op.Out[0], c.cfg.Size)
	}
	return nil
}

// runPlain runs the uncompressed algorithms of package collective.
func runPlain(ctx context.Context, conn collective.Conn, op *Op, a collective.Args) error {
	var err error
	switch op.Kind {
	case opkind.AllReduce:
		err = collective.AllReduce(ctx, conn, a)
	case opkind.Broadcast:
		err = collective.Broadcast(ctx, conn, a)
	case opkind.Reduce:
		err = collective.Reduce(ctx, conn, a)
	case opkind.AllGather:
		err = collective.AllGather(ctx, conn, a)
	case opkind.ReduceScatter:
		err = collective.ReduceScatter(ctx, conn, a)
	case opkind.AllToAll:
		err = collective.AllToAll(ctx, conn, a)
	case opkind.Gather:
		err = collective.Gather(ctx, conn, a)
	case opkind.Scatter:
		err = collective.Scatter(ctx, conn, a)
	default:
		return fmt.Errorf("no algorithm for %s", op.Kind)
	}
	return err
}

// premultiplied returns the op's inputs scaled by its PREMUL_SUM factor. An
// in-place all-reduce scales its own buffer (the result overwrites it
// anyway); other ops scale a private copy so the caller's input is kept.
func (c *Comm) premultiplied(op *Op) [][]byte {
	if op.Kind == opkind.AllReduce {
		reduce.Scale(op.DType, op.In[0], op.PreMul)
		return op.In
	}
	scaled := make([][]byte, len(op.In))
	for i, b := range op.In {
		s := c.pool.Get(len(b))
		copy(s, b)
		reduce.Scale(op.DType, s, op.PreMul)
		scaled[i] = s
	}
	return scaled
}

func (c *Comm) releaseScaled(op *Op, bufs [][]byte) {
	if op.Kind == opkind.AllReduce {
		return
	}
	for _, b := range bufs {
		c.pool.Put(b)
	}
}
