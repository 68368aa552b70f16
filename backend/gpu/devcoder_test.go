package gpu

import (
	"bytes"
	"errors"
	"testing"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// devData puts host bytes into the emulation's device memory.
func devData(t *testing.T, d *Device, b []byte) []byte {
	t.Helper()
	p, err := d.scratch(int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	v := view(p, len(b))
	if err := d.CopyOut(v, b); err != nil {
		t.Fatal(err)
	}
	return v
}

func hostData(t *testing.T, d *Device, v []byte) []byte {
	t.Helper()
	b := make([]byte, len(v))
	if err := d.CopyIn(b, v); err != nil {
		t.Fatal(err)
	}
	return b
}

// The GPU coder writes the Go codec's bytes (frames and split parts), reads
// what the Go codec writes, and reports a corrupt message as zcoll's
// *CorruptError.
func TestDevCoderIsTheGoCodec(t *testing.T) {
	d := newDevice(emuKernels(t), 0)
	co := d.Coder()
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float32, dtype.Float8E4M3FN, dtype.Float8E5M2} {
		for _, numel := range []int{1, 1000, 70001} {
			src := gradients(dt, numel, uint64(numel))
			dsrc := devData(t, d, src)
			want, err := codec.NewEncoder().Encode(nil, src, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			f, err := co.EncodeFrame(dsrc, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f, want) {
				t.Fatalf("%v/%d: the GPU frame differs from the Go codec's", dt, numel)
			}
			co.PutMsg(f)
			e := codec.NewEncoder()
			ws, err := e.EncodeStatic(nil, src, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			wd, err := e.EncodeDynamic(nil)
			if err != nil {
				t.Fatal(err)
			}
			s, dyn, err := co.EncodeSplit(dsrc, dt, codec.Zip3)
			if err != nil {
				t.Fatal(err)
			}
			dp, _ := dyn()
			if !bytes.Equal(s, ws) || !bytes.Equal(dp, wd) {
				t.Fatalf("%v/%d: the GPU split parts differ from the Go codec's", dt, numel)
			}
			out, err := co.Scratch(len(src))
			if err != nil {
				t.Fatal(err)
			}
			if err := co.DecodeSplit(out, s, dp, dt, codec.Zip3); err != nil || !bytes.Equal(hostData(t, d, out), src) {
				t.Fatalf("%v/%d: split round trip: %v", dt, numel, err)
			}
			co.PutMsg(s)
			co.PutMsg(dp)
			// raw frames (the encoder's fallback) decode too
			raw, _ := codec.NewEncoder().Encode(nil, src, dt, codec.Raw)
			for _, frame := range [][]byte{want, raw} {
				if err := co.DecodeFrame(out, frame, dt); err != nil || !bytes.Equal(hostData(t, d, out), src) {
					t.Fatalf("%v/%d: decoding a Go frame: %v", dt, numel, err)
				}
			}
			bad := bytes.Clone(want)
			bad[len(bad)/2] ^= 0x10
			var ce *zcoll.CorruptError
			if err := co.DecodeFrame(out, bad, dt); !errors.As(err, &ce) {
				t.Fatalf("%v/%d: a corrupt frame gave %v, want a *zcoll.CorruptError", dt, numel, err)
			}
			co.PutScratch(out)
			d.putScratch(ptr(dsrc))
		}
	}
	if _, err := co.EncodeFrame(devData(t, d, make([]byte, 64)), dtype.BFloat16, codec.Huff); err == nil {
		t.Fatal("huff on the GPU must be refused")
	}
}

// Fold is zcoll's rank-order fold in one pass over sources of every kind
// (device elements, frames, split parts, as received), also in place (its
// destination a plain source), and a corrupt message fails it as zcoll's
// *CorruptError.
func TestDevCoderFold(t *testing.T) {
	d := newDevice(emuKernels(t), 0)
	co := d.Coder()
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32} {
		for _, n := range []int{2, 3, 5} {
			parts := make([][]byte, n)
			srcs := make([]zcoll.FoldSource, n)
			for i := range parts {
				parts[i] = gradients(dt, 5000, uint64(i+1))
				e := codec.NewEncoder()
				switch i % 3 {
				case 1:
					srcs[i].Plain = devData(t, d, parts[i])
				case 0:
					srcs[i].Frame, _ = e.Encode(nil, parts[i], dt, codec.Zip3)
				case 2:
					srcs[i].Static, _ = e.EncodeStatic(nil, parts[i], dt, codec.Zip3)
					srcs[i].Dynamic, _ = e.EncodeDynamic(nil)
					srcs[i].Kind = codec.Zip3
				}
			}
			want := refFold(dt, parts)
			out, _ := co.Scratch(len(want))
			if err := co.Fold(dt, int(reduce.Sum), out, srcs); err != nil || !bytes.Equal(hostData(t, d, out), want) {
				t.Fatalf("%v/%d: fold: %v", dt, n, err)
			}
			if err := co.Fold(dt, int(reduce.Sum), srcs[1].Plain, srcs); err != nil || !bytes.Equal(hostData(t, d, srcs[1].Plain), want) {
				t.Fatalf("%v/%d: in-place fold: %v", dt, n, err)
			}
			srcs[0].Frame[len(srcs[0].Frame)/2] ^= 4
			var ce *zcoll.CorruptError
			if err := co.Fold(dt, int(reduce.Sum), out, srcs); !errors.As(err, &ce) {
				t.Fatalf("%v/%d: a corrupt frame gave %v", dt, n, err)
			}
		}
	}
}

// Stage keeps the op's aliasing on the host (an in-place all_gather's
// input inside its output) and copies back only the outputs.
func TestStageKeepsAliasing(t *testing.T) {
	d := newDevice(emuKernels(t), 0)
	whole := devData(t, d, []byte("0123456789abcdef"))
	other := devData(t, d, []byte("XYZ"))
	s, err := d.Stage([][]byte{whole[4:8], other}, [][]byte{whole[0:8], whole[8:16]})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.In[0]) != "4567" || string(s.In[1]) != "XYZ" || string(s.Out[0]) != "01234567" {
		t.Fatalf("staged views: %q %q %q", s.In[0], s.In[1], s.Out[0])
	}
	if ptr(s.In[0]) != ptr(s.Out[0])+4 {
		t.Fatal("an input inside an output is no longer inside it")
	}
	copy(s.Out[1], "ABCDEFGH")
	s.In[1][0] = '!' // an input alone is not copied back
	if err := s.CopyBack(); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if got := string(hostData(t, d, whole)); got != "01234567ABCDEFGH" {
		t.Fatalf("after CopyBack: %q", got)
	}
	if got := string(hostData(t, d, other)); got != "XYZ" {
		t.Fatalf("an input was copied back: %q", got)
	}
}
