package comm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/transport"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// Point-to-point ops bypass the collective queue: a recv is posted at once
// (posting order is matching order, as in MPI) and a send goes through a
// per-destination FIFO so two sends with the same tag arrive in the order
// they were issued.
//
// A message starts with a head (slot 0 of its tag), matched in order. The
// head of an uncoded message is the whole payload. A coded message (UCCL-Zip
// split-send: static parts first, coded exponents after) has an empty head
// whose descriptor says so and names the codec kind, the segment size and a
// message number; its parts follow on slots partSlot(number, slot), so the
// parts of two messages with the same tag never meet. The receiver decides
// per message from the head, so the sender may choose alone.

type sendQueue struct {
	mu      sync.Mutex
	pending []*task
	running bool
	nextID  uint32 // message numbers of coded messages to this peer
}

// partSlot is the slot of a coded message's part: the top bit keeps it
// apart from heads (slot 0), then 14 bits of message number and the split
// stream's own slot (step bit and 16-bit segment).
func partSlot(id, slot uint32) uint32 { return 1<<31 | (id&0x3fff)<<17 | slot&0x1ffff }

func (c *Comm) startP2P(t *task) {
	op := t.op
	if c.cfg.Size == 1 {
		// validate() already refused any peer in a group of one.
		go c.complete(t, -1, fmt.Errorf("zipccl: %s in a group of one", op.Kind))
		return
	}
	switch op.Kind {
	case opkind.Recv:
		if op.Root < 0 {
			c.mesh.Connect()
		}
		mine := describe(op, c.cfg.Rank)
		var head descFields
		var dev *gpu.Device
		var stage []byte // a device op's uncoded payload, in host memory
		if op.Dev != nil {
			var err error
			if dev, err = gpu.DeviceFor(c.gpuEnv(), op.Dev.Index); err != nil {
				go c.complete(t, -1, c.p2pErr(op, op.Root, fmt.Errorf("the coded GPU path cannot use cuda:%d: %w", op.Dev.Index, err)))
				return
			}
		}
		accept := func(d transport.Desc, n uint64) ([]byte, error) {
			head = decodeDesc(d)
			if head.kind != mine.kind || head.dt != mine.dt {
				return nil, &transport.MismatchError{Peer: op.Root, Want: mine.encode(), Got: d, WantLen: uint64(len(op.Out[0])), GotLen: n}
			}
			if head.flags&flagCoded == 0 {
				if dev != nil {
					stage = dev.HostBuf(len(op.Out[0]))
					return stage, nil
				}
				return op.Out[0], nil
			}
			if head.count != uint64(op.numel(op.Out[0])) {
				return nil, &transport.MismatchError{Peer: op.Root, Want: d, Got: d, WantLen: uint64(len(op.Out[0])), GotLen: head.count * uint64(op.DType.Size())}
			}
			return []byte{}, nil
		}
		pd := c.mesh.PostAccept(op.Root, transport.Key{Kind: transport.P2P, Seq: uint64(op.Tag)}, accept)
		go func() {
			ctx, cancel := c.opContext(op)
			defer cancel()
			src, err := pd.Wait(ctx)
			if err == nil && dev != nil {
				err = c.recvDevice(ctx, t, dev, src, head, stage)
			} else if err == nil && head.flags&flagCoded != 0 {
				err = c.recvCoded(ctx, t, src, head, op.Out[0], zcoll.HostCoder(c.pool))
			}
			if stage != nil {
				dev.PutHostBuf(stage)
			}
			c.complete(t, src, c.p2pErr(op, src, err))
		}()
	case opkind.Send:
		q := c.sendQ[op.Root]
		if q == nil {
			q = &sendQueue{}
			c.sendQ[op.Root] = q
		}
		q.mu.Lock()
		q.pending = append(q.pending, t)
		if !q.running {
			q.running = true
			go c.drainSends(q)
		}
		q.mu.Unlock()
	}
}

func (c *Comm) drainSends(q *sendQueue) {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		t := q.pending[0]
		q.pending = q.pending[1:]
		q.mu.Unlock()
		op := t.op
		ctx, cancel := c.opContext(op)
		var err error
		t.decision = c.decideP2P(op)
		var id uint32
		if t.decision.Coded {
			id = q.nextID
			q.nextID++
		}
		plain := func(buf []byte) error {
			desc := describe(op, c.cfg.Rank).encode()
			err := c.mesh.Send(ctx, op.Root, transport.Key{Kind: transport.P2P, Seq: uint64(op.Tag)}, &desc, buf)
			if err == nil {
				t.wire.Add(int64(len(buf)))
			}
			return err
		}
		coded := func(co zcoll.Coder) error { return c.sendCoded(ctx, t, id, co) }
		switch {
		case op.Dev != nil:
			err = c.sendDevice(ctx, t, plain, coded)
		case t.decision.Coded:
			err = coded(zcoll.HostCoder(c.pool))
		default:
			err = plain(op.In[0])
		}
		cancel()
		c.complete(t, op.Root, c.p2pErr(op, op.Root, err))
	}
}

func (c *Comm) opContext(op *Op) (context.Context, context.CancelFunc) {
	timeout := c.Timeout()
	if op.Timeout > 0 {
		timeout = time.Duration(op.Timeout) * time.Millisecond
	}
	return context.WithTimeoutCause(c.ctx, timeout, &timeoutError{after: timeout.String()})
}

func (c *Comm) p2pErr(op *Op, peer int, err error) error {
	if err == nil {
		return nil
	}
	dir := "to"
	if op.Kind == opkind.Recv {
		dir = "from"
	}
	who := fmt.Sprintf("rank %d", peer)
	if peer < 0 {
		who = "any rank"
	}
	what := fmt.Sprintf("zipccl: %s %s %s (tag %d, %s) on rank %d of group %q", op.Kind, dir, who, op.Tag, op.DType, c.cfg.Rank, c.cfg.Name)
	return c.wrapErr(what, describe(op, c.cfg.Rank), err)
}

// decideP2P is the switcher's call for a send, from the group's latest
// agreed state (the receiver follows whatever the sender chose).
func (c *Comm) decideP2P(op *Op) switcher.Decision {
	z := c.shared.Load()
	in := switcher.Input{
		Op: switcher.SendRecv, DType: op.DType, Bytes: len(op.In[0]), Ranks: c.cfg.Size,
		Mode: z.mode, Profile: z.profile, Ratio: z.ratios[op.DType],
	}
	if fromDevice(op) {
		zip3Only(&in)
	}
	return switcher.Decide(in, z.th)
}

// sendCoded sends the head of a coded message, then its split parts coded
// by co.
func (c *Comm) sendCoded(ctx context.Context, t *task, id uint32, co zcoll.Coder) error {
	op := t.op
	f := describe(op, c.cfg.Rank).withDecision(c.z.mode, t.decision, false)
	f.root = int32(id & 0x3fff)
	f.count = uint64(op.numel(op.In[0]))
	f.layout = uint64(zcoll.DefaultSegment)
	desc := f.encode()
	tag := uint64(op.Tag)
	if err := c.mesh.Send(ctx, op.Root, transport.Key{Kind: transport.P2P, Seq: tag}, &desc); err != nil {
		return err
	}
	var st zcoll.Stats
	defer func() {
		t.codecNs.Add(st.EncodeNs.Load())
		t.uncoded.Store(st.SentRaw.Load())
	}()
	return zcoll.SendSplit(ctx, func(slot uint32, bufs ...[]byte) error {
		if err := c.mesh.Send(ctx, op.Root, transport.Key{Kind: transport.P2P, Seq: tag, Slot: partSlot(id, slot)}, &desc, bufs...); err != nil {
			return err
		}
		t.wire.Add(byteLen(bufs))
		return nil
	}, op.In[0], op.DType, t.decision.Kind, zcoll.DefaultSegment, co, &st)
}

// recvCoded receives the parts of a coded message announced by head,
// decoded by co into dst.
func (c *Comm) recvCoded(ctx context.Context, t *task, src int, head descFields, dst []byte, co zcoll.Coder) error {
	op := t.op
	t.decision = switcher.Decision{Zcoll: true, Coded: true, Kind: codec.Kind(head.flags >> 4 & 3)}
	id, tag := uint32(head.root), uint64(op.Tag)
	var st zcoll.Stats
	defer func() { t.codecNs.Add(st.DecodeNs.Load()) }()
	return zcoll.RecvSplit(ctx, func(slot uint32, buf []byte) (int, error) {
		pd := c.mesh.PostUpTo(src, transport.Key{Kind: transport.P2P, Seq: tag, Slot: partSlot(id, slot)}, buf, nil)
		if _, err := pd.Wait(ctx); err != nil {
			return 0, err
		}
		return pd.Len(), nil
	}, dst, op.DType, t.decision.Kind, int(head.layout), co, &st)
}

// recvDevice completes a device op's receive once the message's head is
// in: an uncoded payload already in host memory (stage) is copied to the
// GPU; a coded one is decoded on the GPU, or, if the sender coded a kind
// the GPU lacks (huff, from a rank sending CPU tensors), on the host and
// then copied.
func (c *Comm) recvDevice(ctx context.Context, t *task, dev *gpu.Device, src int, head descFields, stage []byte) error {
	op := t.op
	// the output may still be in use on the caller's stream
	if err := gpu.WaitEventOf(c.gpuEnv(), ctx, op.Dev.Done); err != nil {
		return err
	}
	switch {
	case head.flags&flagCoded == 0:
		return dev.CopyOut(op.Out[0], stage)
	case codec.Kind(head.flags>>4&3) == codec.Zip3:
		t.gpuCoded = true
		return c.recvCoded(ctx, t, src, head, op.Out[0], dev.Coder())
	}
	host := dev.HostBuf(len(op.Out[0]))
	defer dev.PutHostBuf(host)
	if err := c.recvCoded(ctx, t, src, head, host, zcoll.HostCoder(c.pool)); err != nil {
		return err
	}
	return dev.CopyOut(op.Out[0], host)
}
