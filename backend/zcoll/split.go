package zcoll

import (
	"context"
	"fmt"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/internal/workgroup"
)

// Split mode (UCCL-Zip's split-send; ZipCCL's all-to-all design 2). Every
// segment travels as two messages:
//
//	static   step 0: codec's static part, exactly StaticLen(numel, dt, kind)
//	         bytes. Sent as soon as it exists: for Huff it is just the raw
//	         sign/mantissa bytes (one fast split pass), for Zip3 most of the
//	         work.
//	dynamic  step 1: codec's dynamic part (Huffman-coded exponents, or the
//	         zip3 escapes), followed by an 8-byte trailer "ZCS" 0x01 kind
//	         0 0 0 naming the kind the sender used.
//
// With a concrete kind the receiver knows the static length up front; with
// Auto the sender picks the kind per segment (codec.ChooseKind) and the
// receiver learns it from the trailer, receiving the static part into a
// buffer of the largest static length. The receiver posts both receives of
// a segment at once, so either may arrive first, and decodes when it has
// both (codec.DecodeSplit). A part that does not match its segment, or that
// fails its checksums, is a *CorruptError.

const (
	stepStatic  = 0
	stepDynamic = 1
	trailerLen  = 8
)

func trailer(k codec.Kind) [trailerLen]byte {
	return [trailerLen]byte{'Z', 'C', 'S', 1, byte(k)}
}

// staticCap is the receive buffer for a static part of numel elements.
func staticCap(numel int, dt dtype.DType, k codec.Kind) int {
	if k != codec.Auto {
		return codec.StaticLen(numel, dt, codec.EffectiveKind(dt, k))
	}
	return max(codec.StaticLen(numel, dt, codec.Raw), codec.StaticLen(numel, dt, codec.Zip3), codec.StaticLen(numel, dt, codec.Huff))
}

// dynamicCap is the receive buffer for a dynamic part (with its trailer).
func dynamicCap(numel int, dt dtype.DType, k codec.Kind) int {
	k = codec.EffectiveKind(dt, k)
	n := 0
	switch k {
	case codec.Auto:
		n = max(codec.MaxDynamicLen(numel, dt, codec.Zip3), codec.MaxDynamicLen(numel, dt, codec.Huff))
	case codec.Zip3, codec.Huff:
		n = codec.MaxDynamicLen(numel, dt, k)
	}
	return n + trailerLen
}

// dynamicEncCap is what EncodeDynamic may need for the concrete kind k
// (Huff reserves a block's worst case while coding it).
func dynamicEncCap(numel int, dt dtype.DType, k codec.Kind) int {
	n := dynamicCap(numel, dt, k)
	if k == codec.Huff {
		n += huffSlack
	}
	return n
}

// splitSend starts, in sp, the goroutines that send the segments (cut c) of
// src in split mode through send: an encoder that produces static(k) and
// then dynamic(k) for k = 0, 1, ... into a short queue, and a sender that
// drains it in that order, so the static part of a segment goes out while
// its dynamic part is being coded.
func splitSend(sp spawner, ctx context.Context, co Coder, st *Stats, src []byte, dt dtype.DType, kind codec.Kind, c cut,
	send func(step, k int, buf []byte) error) {
	if c.n == 0 {
		return
	}
	type part struct {
		step, k int
		buf     []byte
	}
	q := make(chan part, 4)
	sp.Go(func() error {
		for k := range c.n {
			seg := c.of(src, k)
			start := time.Now()
			kk := resolve(seg, dt, kind)
			s, dynamic, err := co.EncodeSplit(seg, dt, kk)
			if err != nil {
				return err
			}
			sdur := time.Since(start)
			if err := workgroup.Put(ctx, q, part{stepStatic, k, s}); err != nil {
				co.PutMsg(s)
				if d, err := dynamic(); err == nil {
					co.PutMsg(d)
				}
				return err
			}
			start = time.Now()
			d, err := dynamic()
			if err != nil {
				return err
			}
			t := trailer(kk)
			d = append(d, t[:]...)
			if st != nil {
				st.EncodeNs.Add(int64(sdur))
			}
			st.encoded(start, len(seg), len(s)+len(d))
			if err := workgroup.Put(ctx, q, part{stepDynamic, k, d}); err != nil {
				return err
			}
		}
		return nil
	})
	sp.Go(func() error {
		for range 2 * c.n {
			p, err := workgroup.Take(ctx, q)
			if err != nil {
				return err
			}
			if err := send(p.step, p.k, p.buf); err != nil {
				return err
			}
			if p.step == stepStatic {
				st.sent(c.len(p.k))
			}
			co.PutMsg(p.buf)
		}
		return nil
	})
}

// splitRecv starts, in sp, the goroutines that receive c.n segments in split
// mode: w receivers for static parts and w for dynamic parts (so both parts
// of a segment are posted together), each forwarding its part with fwd (if
// not nil) as soon as it is in, and a decoder that decodes segment k into
// into(k) and then calls deliver(k, that msg) (if not nil; release takes a
// msg back that was not delivered). With into nil the parts are checked but
// not decoded: deliver gets them as msg.coded, for a device fold. recv(step,
// k, buf) receives a message of at most len(buf) bytes and returns its
// length; errors from decoding are wrapped by fail.
func splitRecv(sp spawner, ctx context.Context, co Coder, release func(msg), st *Stats, dt dtype.DType, kind codec.Kind, c cut, w int,
	recv func(step, k int, buf []byte) (int, error), fwd func(step, k int, buf []byte) error,
	into func(k int) (msg, error), deliver func(k int, m msg) error, fail func(k int, err error) error) {
	if c.n == 0 {
		return
	}
	es := dt.Size()
	part := func(step int, size func(numel int) int) *window {
		return workgroup.RecvAhead(sp, ctx, w, c.n, func(k int) (msg, error) {
			buf := co.Msg(size(c.len(k) / es))
			n, err := recv(step, k, buf)
			if err != nil {
				co.PutMsg(buf)
				return msg{}, err
			}
			m := msg{buf: buf[:n], scratch: true}
			if fwd != nil {
				if err := fwd(step, k, m.buf); err != nil {
					return msg{}, err
				}
			}
			return m, nil
		})
	}
	sw := part(stepStatic, func(numel int) int { return staticCap(numel, dt, kind) })
	dw := part(stepDynamic, func(numel int) int { return dynamicCap(numel, dt, kind) })
	sp.Go(func() error {
		for k := range c.n {
			s, err := sw.Next(ctx, k)
			if err != nil {
				return err
			}
			d, err := dw.Next(ctx, k)
			if err != nil {
				return err
			}
			if into == nil {
				k8, dyn, err := checkSplit(c.len(k)/es, s.buf, d.buf, dt, kind)
				if err != nil {
					co.PutMsg(s.buf)
					co.PutMsg(d.buf)
					return fail(k, err)
				}
				m := msg{coded: &FoldSource{Static: s.buf, Dynamic: dyn, Kind: k8}}
				if err := deliver(k, m); err != nil {
					release(m)
					return err
				}
				continue
			}
			m, err := into(k)
			if err == nil {
				if err = decodeSplit(co, st, m.buf, s.buf, d.buf, dt, kind); err != nil {
					release(m)
				}
			}
			co.PutMsg(s.buf)
			co.PutMsg(d.buf)
			if err != nil {
				return fail(k, err)
			}
			if deliver != nil {
				if err := deliver(k, m); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// decodeSplit checks the trailer of dyn and decodes (static, dyn) into dst.
// want is the kind the receiver asked for (Auto: any).
func decodeSplit(co Coder, st *Stats, dst, static, dyn []byte, dt dtype.DType, want codec.Kind) error {
	start := time.Now()
	k, dyn, err := checkSplit(len(dst)/dt.Size(), static, dyn, dt, want)
	if err != nil {
		return err
	}
	if err := co.DecodeSplit(dst, static, dyn, dt, k); err != nil {
		return err
	}
	st.decoded(start, len(dst))
	return nil
}

// checkSplit checks that static and dyn (with its trailer) are the split
// parts of numel elements of dt of the kind want asks for (Auto: any), and
// returns their kind and the dynamic part without the trailer.
func checkSplit(numel int, static, dyn []byte, dt dtype.DType, want codec.Kind) (codec.Kind, []byte, error) {
	if len(dyn) < trailerLen {
		return 0, nil, corrupt("dynamic part of %d bytes has no trailer", len(dyn))
	}
	t := dyn[len(dyn)-trailerLen:]
	dyn = dyn[:len(dyn)-trailerLen]
	k := codec.Kind(t[4])
	if t[0] != 'Z' || t[1] != 'C' || t[2] != 'S' || t[3] != 1 || t[5] != 0 || t[6] != 0 || t[7] != 0 {
		return 0, nil, corrupt("bad split trailer % x", t)
	}
	if (k != codec.Raw && k != codec.Zip3 && k != codec.Huff) || codec.EffectiveKind(dt, k) != k {
		return 0, nil, corrupt("split trailer names kind %v for %v", k, dt)
	}
	if want != codec.Auto && k != codec.EffectiveKind(dt, want) {
		return 0, nil, corrupt("split parts coded as %v, want %v", k, want)
	}
	if sl := codec.StaticLen(numel, dt, k); len(static) != sl {
		return 0, nil, corrupt("static part of %d bytes, want %d for %d bytes of %v as %v", len(static), sl, numel*dt.Size(), dt, k)
	}
	return k, dyn, nil
}

// SendSplit sends src (whole elements of dt) as split-mode messages through
// send, for point-to-point use by the engine: segment k (of segment bytes;
// 0 means the framed default, see SegmentMin) goes as its static part in message slot
// collective.Slot(0, k), sent as soon as it is produced, and then its
// dynamic part plus an 8-byte trailer naming the kind in collective.Slot(1,
// k). kind may be Zip3, Huff, Raw or Auto (chosen per segment; the trailer
// tells the receiver). send is called from one goroutine at a time, in
// order: static 0, dynamic 0, static 1, ...; it must not retain its buffers
// after returning. co codes src (a DeviceMemory coder for device memory,
// with a concrete kind); st may be nil. SendSplit returns after every
// message was handed to send (or the first error); an empty src sends
// nothing.
func SendSplit(ctx context.Context, send func(slot uint32, bufs ...[]byte) error, src []byte, dt dtype.DType, kind codec.Kind, segment int, co Coder, st *Stats) error {
	c, err := splitCut("SendSplit", len(src), dt, kind, segment, co)
	if err != nil {
		return err
	}
	g, gctx := newGroup(ctx)
	splitSend(g, gctx, co, st, src, dt, kind, c, func(step, k int, buf []byte) error {
		return send(collective.Slot(step, k), buf)
	})
	return g.Wait()
}

// RecvSplit receives into dst what SendSplit sent from a source of the same
// length, dtype, kind and segment size. recv(slot, buf) must receive the
// message of that slot (of at most len(buf) bytes) into buf and return its
// length; RecvSplit calls it concurrently from several goroutines, with
// both parts of the next few segments posted at once, so it copes with the
// parts arriving in any order. Segments are decoded as soon as both parts
// are in. A part that fails to decode or does not match is reported as a
// *CorruptError; dst may then hold partial data. RecvSplit returns after
// every goroutine it started has exited.
func RecvSplit(ctx context.Context, recv func(slot uint32, buf []byte) (int, error), dst []byte, dt dtype.DType, kind codec.Kind, segment int, co Coder, st *Stats) error {
	c, err := splitCut("RecvSplit", len(dst), dt, kind, segment, co)
	if err != nil {
		return err
	}
	g, gctx := newGroup(ctx)
	splitRecv(g, gctx, co, func(msg) {}, st, dt, kind, c, windowFor(c.size, 2, true),
		func(step, k int, buf []byte) (int, error) { return recv(collective.Slot(step, k), buf) },
		nil,
		func(k int) (msg, error) { return msg{buf: c.of(dst, k)}, nil },
		nil,
		func(k int, err error) error { return err })
	return g.Wait()
}

func splitCut(fn string, nbytes int, dt dtype.DType, kind codec.Kind, segment int, co Coder) (cut, error) {
	if !dt.Valid() {
		return cut{}, fmt.Errorf("zcoll: %s: invalid dtype %v", fn, dt)
	}
	if _, dev := co.(DeviceMemory); dev && kind == codec.Auto {
		return cut{}, fmt.Errorf("zcoll: %s: device memory needs a concrete codec kind (auto reads the data on the host)", fn)
	}
	switch kind {
	case codec.Raw, codec.Zip3, codec.Huff, codec.Auto:
	default:
		return cut{}, fmt.Errorf("zcoll: %s: invalid codec kind %v", fn, kind)
	}
	if segment < 0 {
		return cut{}, fmt.Errorf("zcoll: %s: negative segment size %d", fn, segment)
	}
	es := dt.Size()
	if nbytes%es != 0 {
		return cut{}, fmt.Errorf("zcoll: %s: %d bytes is not a whole number of %v elements", fn, nbytes, dt)
	}
	s := segSize(nbytes, es, segment, true)
	return cut{size: s, n: bufs.CeilDiv(nbytes, s), total: nbytes}, nil
}
