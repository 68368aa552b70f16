package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Completion: the watcher polls the end events of the ops in flight
// (through the shim's query), completes them in stream order, and fails
// them all, aborting the NCCL communicators, on a timeout, an NCCL
// asynchronous error or a broken group.

const (
	minPause   = 20 * time.Microsecond
	maxPause   = time.Millisecond
	asyncEvery = 10 * time.Millisecond
)

// watch hands an enqueued op to the watcher, which completes it when its
// end event completes.
func (g *Group) watch(op *Op, deadline time.Time) {
	g.wmu.Lock()
	g.queues[op.Stream] = append(g.queues[op.Stream], &flight{op: op, deadline: deadline})
	g.nflight++
	if !g.watching {
		g.watching = true
		go g.watchLoop()
	}
	g.wcond.Signal()
	g.wmu.Unlock()
}

func (g *Group) watchLoop() {
	pause := minPause
	lastAsync := time.Now()
	query := g.env.eventQuery()
	for {
		g.wmu.Lock()
		for g.nflight == 0 && !g.closed {
			g.wcond.Wait()
		}
		if g.nflight == 0 {
			g.watching = false
			g.wmu.Unlock()
			return
		}
		var heads []*flight
		var all []*flight
		for _, q := range g.queues {
			if len(q) > 0 {
				heads = append(heads, q[0])
			}
			all = append(all, q...)
		}
		g.wmu.Unlock()

		progress := false
		for _, f := range heads {
			done, err := true, error(nil)
			if query != nil {
				done, err = query(f.op.Done)
			}
			if err != nil {
				g.breakDevice(fmt.Errorf("%s on rank %d: querying its CUDA event failed: %v", f.op.Label, g.cfg.Rank, err), f)
				progress = true
				break
			}
			if done && g.pop(f) {
				f.op.OnDone(nil)
				progress = true
			}
		}
		if progress {
			pause = minPause
			continue
		}
		if err := g.cfg.Ctx.Err(); err != nil {
			g.breakDevice(fmt.Errorf("%v", context.Cause(g.cfg.Ctx)), nil)
			continue
		}
		now := time.Now()
		for _, f := range all {
			if now.After(f.deadline) {
				g.breakDevice(errTimeout{f: f, rank: g.cfg.Rank, after: f.op.Timeout}, f)
				progress = true
				break
			}
		}
		if progress {
			continue
		}
		if now.Sub(lastAsync) >= asyncEvery {
			lastAsync = now
			if err := g.asyncError(); err != nil {
				g.breakDevice(fmt.Errorf("NCCL reported an asynchronous error on rank %d: %v", g.cfg.Rank, err), nil)
				continue
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

type errTimeout struct {
	f     *flight
	rank  int
	after time.Duration
}

func (e errTimeout) Error() string {
	return fmt.Sprintf("%s timed out on rank %d after %v", e.f.op.Label, e.rank, e.after)
}

func (g *Group) asyncError() error {
	g.cmu.Lock()
	comms := append([]ncclComm(nil), g.comms...)
	g.cmu.Unlock()
	for _, c := range comms {
		if err := c.AsyncError(); err != nil {
			return err
		}
	}
	return nil
}

// pop removes f, the head of its stream's queue; false if it is gone
// already (failed by breakDevice meanwhile).
func (g *Group) pop(f *flight) bool {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	q := g.queues[f.op.Stream]
	if len(q) == 0 || q[0] != f {
		return false
	}
	g.queues[f.op.Stream] = q[1:]
	g.nflight--
	return true
}

// breakDevice makes the group unusable: it aborts every NCCL communicator
// (which ends kernels stuck waiting for a peer) and fails every op in
// flight. culprit, when known, is the op that timed out or failed.
func (g *Group) breakDevice(reason error, culprit *flight) {
	g.wmu.Lock()
	first := g.broken == nil
	if first {
		g.broken = reason
	}
	broken := g.broken
	var flights []*flight
	for s, q := range g.queues {
		flights = append(flights, q...)
		delete(g.queues, s)
	}
	g.nflight = 0
	g.wmu.Unlock()

	g.abortComms()
	for _, f := range flights {
		switch {
		case f == culprit:
			if te, ok := reason.(errTimeout); ok {
				f.op.OnDone(g.fail(CodeTimeout, f.op, "timed out after %v: its device work did not finish (the NCCL communicators were aborted)", te.after))
			} else {
				f.op.OnDone(g.fail(CodeComm, f.op, "%v (the NCCL communicators were aborted)", reason))
			}
		default:
			f.op.OnDone(g.fail(CodeComm, f.op, "failed because the group broke: %v", broken))
		}
	}
	if first {
		g.log.Warnf("GPU path broken: %v", broken)
		if g.cfg.OnBroken != nil {
			g.cfg.OnBroken(broken)
		}
	}
}

func (g *Group) abortComms() {
	g.cmu.Lock()
	comms := g.comms
	g.comms = nil
	g.cmu.Unlock()
	for _, c := range comms {
		if err := c.Abort(); err != nil {
			g.log.Infof("ncclCommAbort: %v", err)
		}
	}
}

// Abort fails every op in flight and aborts the NCCL communicators.
func (g *Group) Abort(reason string) {
	g.breakDevice(errors.New(reason), nil)
}
