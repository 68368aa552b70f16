package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// AllToAll sends In[j] to rank j and receives Out[j] from rank j. Lengths may
// differ (uneven splits), including zero; rank i's len(In[j]) must equal rank
// j's len(Out[i]). All pairwise exchanges run concurrently, each direction in
// its own goroutine so every receive is posted early and lands straight in
// Out; the rank's own block is copied locally.
func AllToAll(ctx context.Context, c Conn, a Args) error {
	const op = "alltoall"
	n, me, err := checkComm(op, c, 0, false)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), n); err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), n); err != nil {
		return err
	}
	if len(a.In[me]) != len(a.Out[me]) {
		return fmt.Errorf("collective: %s: In[%d] has %d bytes, Out[%d] %d", op, me, len(a.In[me]), me, len(a.Out[me]))
	}
	s := step{op: op, algo: "pairwise", c: c}
	// The exchanges are independent: a bad one (say, a peer sending the
	// wrong length) must not stop the others.
	g, gctx := newIndependentGroup(ctx)
	for p := range n {
		if p == me {
			continue
		}
		if len(a.Out[p]) > 0 {
			g.Go(func() error { return s.recv(gctx, p, 0, 0, a.Out[p]) })
		}
		if len(a.In[p]) > 0 {
			g.Go(func() error { return s.send(gctx, p, 0, 0, a.In[p]) })
		}
	}
	if !bufs.Same(a.Out[me], a.In[me]) {
		copy(a.Out[me], a.In[me])
	}
	return g.Wait()
}
