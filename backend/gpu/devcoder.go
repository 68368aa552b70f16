package gpu

import (
	"encoding/binary"
	"fmt"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// DevCoder codes CUDA device memory for zcoll's algorithms (it is a
// zcoll.DeviceMemory): the kernels encode a segment into device scratch,
// one copy brings the frame (or the split parts) into page-locked host
// memory for the transport, and received messages go back the same way to
// be decoded, or folded, on the GPU. The bytes are those of package codec,
// so a rank that codes on the CPU reads them and writes what this one reads.
//
// Each call runs on a stream lent for the call and waits for it, so calls
// from zcoll's goroutines overlap on the device (one segment's copy with
// another's kernel) as they overlap on the host. Only zip3 is coded here
// (the kernels have no huff); raw frames, the encoder's fallback, decode.
type DevCoder struct {
	d *Device
}

// Coder returns a zcoll coder over d.
func (d *Device) Coder() *DevCoder { return &DevCoder{d: d} }

var _ zcoll.DeviceMemory = (*DevCoder)(nil)

// Msg is a page-locked host buffer.
func (c *DevCoder) Msg(n int) []byte { return c.d.HostBuf(n) }

// PutMsg takes a Msg buffer back.
func (c *DevCoder) PutMsg(b []byte) { c.d.PutHostBuf(b) }

func align8(n int64) int64 { return (n + 7) &^ 7 }

func (c *DevCoder) numel(seg []byte, dt dtype.DType) int64 { return int64(len(seg) / dt.Size()) }

func zip3Only(k codec.Kind) error {
	if k != codec.Zip3 {
		return fmt.Errorf("zipccl: the GPU codes zip3 only, not %v", k)
	}
	return nil
}

// kernelErr turns a data error the kernels found into zcoll's
// *CorruptError (the message did not decode); other failures stay as they
// are.
func kernelErr(err error) error {
	if dataError(err) {
		return &zcoll.CorruptError{Err: err}
	}
	return err
}

// EncodeFrame codes seg as one zip3 frame (or the raw frame the encoder
// falls back to), as codec.Encoder.Encode does.
func (c *DevCoder) EncodeFrame(seg []byte, dt dtype.DType, k codec.Kind) ([]byte, error) {
	if err := zip3Only(k); err != nil {
		return nil, err
	}
	k8 := c.d.k
	n := c.numel(seg, dt)
	maxLen := align8(k8.MaxFrameLen(dt, n))
	region := maxLen + 8 // the frame, then its length
	out, err := c.d.scratch(region)
	if err != nil {
		return nil, err
	}
	defer c.d.putScratch(out)
	wsn := k8.EncodeWorkspace(dt, []int64{n})
	ws, err := c.d.scratch(wsn)
	if err != nil {
		return nil, err
	}
	defer c.d.putScratch(ws)
	msg := c.Msg(int(region))
	err = c.d.run(func(st uintptr) error {
		if err := k8.EncodeFrames(c.d.dev, dt, ptr(seg), []int64{n}, out, []int64{0}, out+uintptr(maxLen), ws, wsn, st); err != nil {
			return err
		}
		if err := k8.MemcpyAsync(c.d.dev, ptr(msg), out, region, DeviceToHost, st); err != nil {
			return err
		}
		return k8.WorkspaceStatus(c.d.dev, ws, st)
	})
	if err != nil {
		c.PutMsg(msg)
		return nil, err
	}
	l := int64(binary.LittleEndian.Uint64(msg[maxLen:]))
	if l <= 0 || l > maxLen {
		c.PutMsg(msg)
		return nil, fmt.Errorf("zipccl: the GPU encoder reported a frame of %d bytes (at most %d)", l, maxLen)
	}
	c.d.encodes.Add(1)
	return msg[:l], nil
}

// EncodeSplit codes seg in split mode (zip3: the GPU's split encode has no
// raw fallback, exactly like codec's EncodeStatic).
func (c *DevCoder) EncodeSplit(seg []byte, dt dtype.DType, k codec.Kind) ([]byte, func() ([]byte, error), error) {
	if err := zip3Only(k); err != nil {
		return nil, nil, err
	}
	k8 := c.d.k
	n := c.numel(seg, dt)
	sl := int64(codec.StaticLen(int(n), dt, k))
	dl := align8(int64(codec.MaxDynamicLen(int(n), dt, k)))
	soff := align8(sl)
	region := soff + dl + 8 // static, dynamic, the dynamic length
	dev, err := c.d.scratch(region)
	if err != nil {
		return nil, nil, err
	}
	defer c.d.putScratch(dev)
	wsn := k8.EncodeWorkspace(dt, []int64{n})
	ws, err := c.d.scratch(wsn)
	if err != nil {
		return nil, nil, err
	}
	defer c.d.putScratch(ws)
	static := c.Msg(int(sl))
	// room for the trailer zcoll appends (the length word, read first, may
	// be overwritten by it)
	dyn := c.Msg(int(dl + 8 + 8))
	err = c.d.run(func(st uintptr) error {
		if err := k8.EncodeSplit(c.d.dev, dt, ptr(seg), []int64{n}, dev, []int64{0}, dev+uintptr(soff), []int64{0}, dev+uintptr(soff+dl), ws, wsn, st); err != nil {
			return err
		}
		if err := k8.MemcpyAsync(c.d.dev, ptr(static), dev, sl, DeviceToHost, st); err != nil {
			return err
		}
		if err := k8.MemcpyAsync(c.d.dev, ptr(dyn), dev+uintptr(soff), dl+8, DeviceToHost, st); err != nil {
			return err
		}
		return k8.WorkspaceStatus(c.d.dev, ws, st)
	})
	if err != nil {
		c.PutMsg(static)
		c.PutMsg(dyn)
		return nil, nil, err
	}
	l := int64(binary.LittleEndian.Uint64(dyn[dl:]))
	if l < 0 || l > dl {
		c.PutMsg(static)
		c.PutMsg(dyn)
		return nil, nil, fmt.Errorf("zipccl: the GPU encoder reported a dynamic part of %d bytes (at most %d)", l, dl)
	}
	c.d.encodes.Add(1)
	return static[:sl], func() ([]byte, error) { return dyn[:l], nil }, nil
}

// upload copies host bytes into device scratch (on st).
func (c *DevCoder) upload(st uintptr, dst uintptr, b []byte) error {
	return c.d.k.MemcpyAsync(c.d.dev, dst, ptr(b), int64(len(b)), HostToDevice, st)
}

// DecodeFrame decodes a received frame (zip3 or raw) into dst.
func (c *DevCoder) DecodeFrame(dst, frame []byte, dt dtype.DType) error {
	n := c.numel(dst, dt)
	return c.decode(dt, n, int64(len(frame)), func(st, in, ws uintptr, wsn int64) error {
		if err := c.upload(st, in, frame); err != nil {
			return err
		}
		return c.d.k.DecodeFrames(c.d.dev, dt, in, []int64{0}, []int64{int64(len(frame))}, []int64{n}, ptr(dst), ws, wsn, st)
	})
}

// DecodeSplit decodes received split parts into dst.
func (c *DevCoder) DecodeSplit(dst, static, dyn []byte, dt dtype.DType, k codec.Kind) error {
	if k != codec.Zip3 && k != codec.Raw {
		return &zcoll.CorruptError{Err: fmt.Errorf("split parts of kind %v cannot be decoded on the GPU", k)}
	}
	n := c.numel(dst, dt)
	soff := align8(int64(len(static)))
	return c.decode(dt, n, soff+int64(len(dyn)), func(st, in, ws uintptr, wsn int64) error {
		if err := c.upload(st, in, static); err != nil {
			return err
		}
		if err := c.upload(st, in+uintptr(soff), dyn); err != nil {
			return err
		}
		return c.d.k.DecodeSplit(c.d.dev, dt, int(k), in, []int64{0}, in+uintptr(soff), []int64{0}, []int64{int64(len(dyn))}, []int64{n}, ptr(dst), ws, wsn, st)
	})
}

// decode runs body on a stream with inLen bytes of device scratch for the
// received message (in) and a decode workspace for n elements of dt, then
// checks the kernels' status and counts the decode.
func (c *DevCoder) decode(dt dtype.DType, n, inLen int64, body func(st, in, ws uintptr, wsn int64) error) error {
	in, err := c.d.scratch(inLen)
	if err != nil {
		return err
	}
	defer c.d.putScratch(in)
	wsn := c.d.k.DecodeWorkspace(dt, []int64{n})
	ws, err := c.d.scratch(wsn)
	if err != nil {
		return err
	}
	defer c.d.putScratch(ws)
	err = c.d.run(func(st uintptr) error {
		if err := body(st, in, ws, wsn); err != nil {
			return err
		}
		return c.d.k.WorkspaceStatus(c.d.dev, ws, st)
	})
	if err != nil {
		return kernelErr(err)
	}
	c.d.decodes.Add(1)
	return nil
}

// Copy copies device memory.
func (c *DevCoder) Copy(dst, src []byte) error {
	if len(dst) != len(src) {
		return fmt.Errorf("zipccl: device copy of %d bytes into %d", len(src), len(dst))
	}
	return c.d.run(func(st uintptr) error {
		return c.d.k.MemcpyAsync(c.d.dev, ptr(dst), ptr(src), int64(len(src)), DeviceToDevice, st)
	})
}

// Scratch is device memory for a decoded segment.
func (c *DevCoder) Scratch(n int) ([]byte, error) {
	p, err := c.d.scratch(int64(n))
	if err != nil {
		return nil, err
	}
	return view(p, n), nil
}

// PutScratch takes Scratch memory back.
func (c *DevCoder) PutScratch(b []byte) { c.d.putScratch(ptr(b)) }

// Fold decodes and reduces srcs in rank order into dst in one fused kernel
// (plain sources are device memory; messages are uploaded first): zcoll's
// arithmetic, bit for bit. The kernel's destination may not overlap a
// source, so an in-place fold goes through scratch.
func (c *DevCoder) Fold(dt dtype.DType, op int, dst []byte, srcs []zcoll.FoldSource) error {
	if len(srcs) > 48 {
		return fmt.Errorf("zipccl: the GPU folds at most 48 contributions, not %d", len(srcs))
	}
	k8 := c.d.k
	n := c.numel(dst, dt)
	// the messages, back to back in one upload region
	var up int64
	for _, s := range srcs {
		up += align8(int64(len(s.Frame))) + align8(int64(len(s.Static))) + align8(int64(len(s.Dynamic)))
	}
	var region uintptr
	if up > 0 {
		p, err := c.d.scratch(up)
		if err != nil {
			return err
		}
		defer c.d.putScratch(p)
		region = p
	}
	out := ptr(dst)
	inPlace := false
	for _, s := range srcs {
		inPlace = inPlace || (s.Plain != nil && ptr(s.Plain) == out)
	}
	if inPlace {
		tmp, err := c.d.scratch(int64(len(dst)))
		if err != nil {
			return err
		}
		defer c.d.putScratch(tmp)
		out = tmp
	}
	wsn := k8.ReduceWorkspace(dt, n, len(srcs))
	ws, err := c.d.scratch(wsn)
	if err != nil {
		return err
	}
	defer c.d.putScratch(ws)
	err = c.d.run(func(st uintptr) error {
		sources := make([]Source, len(srcs))
		at := region
		place := func(b []byte) (uintptr, error) {
			p := at
			at += uintptr(align8(int64(len(b))))
			return p, c.upload(st, p, b)
		}
		for i, s := range srcs {
			var err error
			switch {
			case s.Plain != nil:
				if len(s.Plain) != len(dst) {
					return fmt.Errorf("zipccl: fold of a %d-byte contribution into %d bytes", len(s.Plain), len(dst))
				}
				sources[i] = Source{Kind: SrcPlain, Ptr: ptr(s.Plain)}
			case s.Frame != nil:
				sources[i] = Source{Kind: SrcFrame, Len: int64(len(s.Frame))}
				sources[i].Ptr, err = place(s.Frame)
			case s.Kind == codec.Zip3:
				sources[i] = Source{Kind: SrcSplitZip3, Len: int64(len(s.Dynamic))}
				if sources[i].Ptr, err = place(s.Static); err == nil {
					sources[i].B, err = place(s.Dynamic)
				}
			case s.Kind == codec.Raw:
				sources[i] = Source{Kind: SrcSplitRaw}
				sources[i].Ptr, err = place(s.Static)
			default:
				return &zcoll.CorruptError{Err: fmt.Errorf("split parts of kind %v cannot be decoded on the GPU", s.Kind)}
			}
			if err != nil {
				return err
			}
		}
		if err := k8.DecodeReduce(c.d.dev, dt, op, sources, n, out, ws, wsn, st); err != nil {
			return err
		}
		if err := k8.WorkspaceStatus(c.d.dev, ws, st); err != nil {
			return err
		}
		if inPlace {
			return k8.MemcpyAsync(c.d.dev, ptr(dst), out, int64(len(dst)), DeviceToDevice, st)
		}
		return nil
	})
	if err != nil {
		return kernelErr(err)
	}
	c.d.folds.Add(1)
	return nil
}
