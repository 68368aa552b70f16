package collective

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/internal/bufs"
)

// Gather collects every rank's In[0] into Out[j] on Root; Out is only used
// on Root (nil elsewhere). Lengths may differ per rank (len(Out[j]) on the
// root must equal rank j's len(In[0])). Direct: every rank sends to the root,
// which receives from all of them concurrently, straight into Out.
func Gather(ctx context.Context, c Conn, a Args) error {
	const op = "gather"
	n, me, err := checkComm(op, c, a.Root, true)
	if err != nil {
		return err
	}
	if err := need(op, "In", len(a.In), 1); err != nil {
		return err
	}
	s := step{op: op, algo: "direct", c: c}
	in := a.In[0]
	if me != a.Root {
		if len(in) == 0 {
			return nil
		}
		return s.send(ctx, a.Root, 0, 0, in)
	}
	if err := need(op, "Out", len(a.Out), n); err != nil {
		return err
	}
	if len(a.Out[me]) != len(in) {
		return fmt.Errorf("collective: %s: In[0] has %d bytes, Out[%d] %d", op, len(in), me, len(a.Out[me]))
	}
	g, gctx := newGroup(ctx)
	for p := range n {
		if p != me && len(a.Out[p]) > 0 {
			g.Go(func() error { return s.recv(gctx, p, 0, 0, a.Out[p]) })
		}
	}
	if !bufs.Same(a.Out[me], in) {
		copy(a.Out[me], in)
	}
	return g.Wait()
}

// Scatter sends Root's In[j] to rank j's Out[0]; In is only used on Root.
// Lengths may differ per rank (len(In[j]) on the root must equal rank j's
// len(Out[0])). Direct: the root sends to every rank concurrently, straight
// from In.
func Scatter(ctx context.Context, c Conn, a Args) error {
	const op = "scatter"
	n, me, err := checkComm(op, c, a.Root, true)
	if err != nil {
		return err
	}
	if err := need(op, "Out", len(a.Out), 1); err != nil {
		return err
	}
	s := step{op: op, algo: "direct", c: c}
	out := a.Out[0]
	if me != a.Root {
		if len(out) == 0 {
			return nil
		}
		return s.recv(ctx, a.Root, 0, 0, out)
	}
	if err := need(op, "In", len(a.In), n); err != nil {
		return err
	}
	if len(a.In[me]) != len(out) {
		return fmt.Errorf("collective: %s: In[%d] has %d bytes, Out[0] %d", op, me, len(a.In[me]), len(out))
	}
	g, gctx := newGroup(ctx)
	for p := range n {
		if p != me && len(a.In[p]) > 0 {
			g.Go(func() error { return s.send(gctx, p, 0, 0, a.In[p]) })
		}
	}
	if !bufs.Same(out, a.In[me]) {
		copy(out, a.In[me])
	}
	return g.Wait()
}
