package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/transport"
)

// MonitoredBarrier is torch.distributed.monitored_barrier with gloo's
// semantics: every other rank reports to rank 0, which waits for them in
// rank order for at most timeout in all, then releases them. When a rank
// has not arrived in time, rank 0 fails naming it (the first one in rank
// order, or every one with waitAll), and tells the ranks that did arrive,
// which fail too instead of waiting (gloo's wait for their group timeout).
// It runs beside the group's collectives, on messages of its own, so it
// answers whatever they are doing: it is what a user reaches for when a job
// hangs. Errors are worded as gloo's, which torch's tests match.
//
// A negative timeout is the group's.
func (c *Comm) MonitoredBarrier(timeout time.Duration, waitAll bool) error {
	if err := c.usable(&Op{Kind: opkind.Barrier}); err != nil {
		return err
	}
	if timeout < 0 {
		timeout = c.Timeout()
	}
	if c.cfg.Size == 1 {
		return nil
	}
	seq := c.monSeq.Add(1)
	arrive := transport.Key{Kind: transport.P2P, Seq: monitorTag(seq, 0)}
	release := transport.Key{Kind: transport.P2P, Seq: monitorTag(seq, 1)}
	desc := describe(&Op{Kind: opkind.Barrier}, c.cfg.Rank).encode()
	me := c.cfg.Rank
	if me != 0 {
		ctx, cancel := context.WithTimeout(c.ctx, timeout+c.Timeout())
		defer cancel()
		err := c.mesh.Send(ctx, 0, arrive, &desc, []byte{1})
		if err == nil {
			buf := make([]byte, 4096)
			pd := c.mesh.PostUpTo(0, release, buf, nil)
			if _, err = pd.Wait(ctx); err == nil && (pd.Len() == 0 || buf[0] != 1) {
				err = fmt.Errorf("rank 0 reports: %s", buf[1:max(pd.Len(), 1)])
			}
		}
		if err != nil {
			return &Error{Code: CodeComm, Msg: fmt.Sprintf("Rank %d successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0. Please check rank 0's logs for the faulty rank (%v)", me, err)}
		}
		return nil
	}

	start := time.Now()
	deadline := start.Add(timeout)
	ms := timeout.Milliseconds()
	pending := make([]*transport.Pending, c.cfg.Size)
	for r := 1; r < c.cfg.Size; r++ {
		pending[r] = c.mesh.PostUpTo(r, arrive, make([]byte, 1), nil)
	}
	var arrived, failed []int
	var fail string
	for r := 1; r < c.cfg.Size; r++ {
		if fail != "" {
			// failed already: the later ranks that came are told so below
			if pending[r].Arrived() {
				arrived = append(arrived, r)
			}
			continue
		}
		if !waitAll && time.Now().After(deadline) {
			info := "No ranks successfully processed in monitoredBarrier."
			if len(arrived) > 0 {
				info = "Successfully processed ranks: " + joinRanks(arrived)
			}
			fail = fmt.Sprintf("Rank 0 timed out in monitoredBarrier after %d ms. %s", ms, info)
			r-- // look at this rank again, as a later one
			continue
		}
		ctx, cancel := context.WithDeadline(c.ctx, deadline)
		_, err := pending[r].Wait(ctx)
		cancel()
		switch {
		case err == nil:
			arrived = append(arrived, r)
		case waitAll:
			failed = append(failed, r)
		default:
			failed = append(failed, r)
			fail = fmt.Sprintf("[Rank 0]: Rank %d failed to pass monitoredBarrier in %d ms (%v)", r, ms, err)
		}
	}
	if waitAll && len(failed) > 0 {
		fail = fmt.Sprintf("[Rank 0]: Ranks %s failed to pass monitoredBarrier in %d ms", joinRanks(failed), ms)
	}
	// Take back the receives no rank answered (a late arrival then waits in
	// the mailbox, unread).
	expired, stop := context.WithCancel(context.Background())
	stop()
	for r := 1; r < c.cfg.Size; r++ {
		_, _ = pending[r].Wait(expired)
	}
	// Release the ranks that arrived: all of them when every rank did.
	verdict := []byte{1}
	if fail != "" {
		verdict = append([]byte{0}, fail...)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.Timeout())
	defer cancel()
	var sendErrs []error
	for _, r := range arrived {
		if err := c.mesh.Send(ctx, r, release, &desc, verdict); err != nil {
			sendErrs = append(sendErrs, fmt.Errorf("releasing rank %d: %w", r, err))
		}
	}
	if fail != "" {
		return &Error{Code: CodeTimeout, Msg: fail}
	}
	if err := errors.Join(sendErrs...); err != nil {
		return &Error{Code: CodeComm, Msg: fmt.Sprintf("[Rank 0]: monitoredBarrier: every rank arrived, but %v", err)}
	}
	return nil
}

// monitorTag is the P2P key of a monitored barrier's messages: the top bit
// keeps them apart from user tags (which torch keeps non-negative).
func monitorTag(seq uint64, phase uint64) uint64 { return 1<<63 | seq<<1 | phase }

func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ", ")
}
