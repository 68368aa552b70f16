package collective

import "context"

// window keeps several receives of a sequence posted at once and hands the
// results over in sequence order. The engine writes a message straight into
// the buffer of a posted receive, but buffers it (an allocation and an extra
// copy) when it arrives first; a single receiving goroutine re-posts too late
// whenever the next message is already behind the one it just finished, so
// w goroutines each own every w-th message of the sequence.
type window struct {
	chans []chan msg
}

// recvAhead starts w receivers in g for the messages 0..count-1 of a
// sequence. recv(i) receives message i (choosing its buffer); message i is
// then collected with next(ctx, i), strictly in order. Each receiver holds at
// most one finished message and one posted receive, bounding the run-ahead
// (and the scratch in use) to 2w messages.
func recvAhead(g *group, ctx context.Context, w, count int, recv func(i int) (msg, error)) *window {
	w = max(1, min(w, count))
	win := &window{chans: make([]chan msg, w)}
	for j := range win.chans {
		ch := make(chan msg, 1)
		win.chans[j] = ch
		g.Go(func() error {
			for i := j; i < count; i += w {
				m, err := recv(i)
				if err != nil {
					return err
				}
				if err := put(ctx, ch, m); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return win
}

// next returns message i, which must be the one after the last collected.
func (w *window) next(ctx context.Context, i int) (msg, error) {
	return take(ctx, w.chans[i%len(w.chans)])
}

// recvSpread is recvAhead for messages nobody waits on in order (they land
// in their final place): w receivers each own every w-th message.
func recvSpread(g *group, w, count int, recv func(i int) error) {
	w = max(1, min(w, count))
	for j := range w {
		g.Go(func() error {
			for i := j; i < count; i += w {
				if err := recv(i); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
