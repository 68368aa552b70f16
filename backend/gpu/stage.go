package gpu

import "sort"

// Staged is an op's device buffers copied into page-locked host memory
// by the engine, for the ops the coded path does not code on the GPU (the
// switcher left them uncoded, or the GPU has no kernel for them): they run
// on the CPU path over the copies, and the outputs go back.
type Staged struct {
	d       *Device
	In, Out [][]byte // host views of the op's buffers, aliasing preserved
	spans   []span
}

// span is one stretch of device memory covered by the op's buffers
// (buffers that overlap, like an in-place all_gather's input inside its
// output, share a span) and its host copy.
type span struct {
	dev     uintptr
	n       int
	host    []byte
	in, out bool
}

// Stage copies the device buffers in (inputs) and out into host memory and
// returns host views of them. Buffers that are the same or overlap on the
// device are so on the host.
func (d *Device) Stage(in, out [][]byte) (*Staged, error) {
	s := &Staged{d: d}
	type ref struct {
		b   []byte
		in  bool
		dst *[]byte
	}
	s.In, s.Out = make([][]byte, len(in)), make([][]byte, len(out))
	var refs []ref
	for i, b := range in {
		refs = append(refs, ref{b, true, &s.In[i]})
	}
	for i, b := range out {
		refs = append(refs, ref{b, false, &s.Out[i]})
	}
	order := make([]int, 0, len(refs))
	for i, r := range refs {
		if len(r.b) > 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool { return ptr(refs[order[a]].b) < ptr(refs[order[b]].b) })
	for _, i := range order {
		r := refs[i]
		lo, hi := ptr(r.b), ptr(r.b)+uintptr(len(r.b))
		if k := len(s.spans) - 1; k >= 0 && lo < s.spans[k].dev+uintptr(s.spans[k].n) {
			sp := &s.spans[k]
			sp.n = max(sp.n, int(hi-sp.dev))
			sp.in = sp.in || r.in
			sp.out = sp.out || !r.in
			continue
		}
		s.spans = append(s.spans, span{dev: lo, n: len(r.b), in: r.in, out: !r.in})
	}
	err := d.run(func(st uintptr) error {
		for i := range s.spans {
			sp := &s.spans[i]
			sp.host = d.HostBuf(sp.n)
			if sp.in {
				if err := d.k.MemcpyAsync(d.dev, ptr(sp.host), sp.dev, int64(sp.n), DeviceToHost, st); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.Release()
		return nil, err
	}
	for _, r := range refs {
		if len(r.b) == 0 {
			*r.dst = r.b[:0:0]
			continue
		}
		p := ptr(r.b)
		for _, sp := range s.spans {
			if p >= sp.dev && p < sp.dev+uintptr(sp.n) {
				off := int(p - sp.dev)
				*r.dst = sp.host[off : off+len(r.b) : off+len(r.b)]
				break
			}
		}
	}
	return s, nil
}

// CopyBack copies the output spans back to the device.
func (s *Staged) CopyBack() error {
	return s.d.run(func(st uintptr) error {
		for _, sp := range s.spans {
			if sp.out {
				if err := s.d.k.MemcpyAsync(s.d.dev, sp.dev, ptr(sp.host), int64(sp.n), HostToDevice, st); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Release returns the host memory.
func (s *Staged) Release() {
	for i := range s.spans {
		s.d.PutHostBuf(s.spans[i].host)
		s.spans[i].host = nil
	}
}

// CopyIn copies n bytes of device memory at src into host memory dst.
func (d *Device) CopyIn(dst []byte, src []byte) error {
	return d.run(func(st uintptr) error {
		return d.k.MemcpyAsync(d.dev, ptr(dst), ptr(src), int64(min(len(dst), len(src))), DeviceToHost, st)
	})
}

// CopyOut copies host memory src into device memory dst.
func (d *Device) CopyOut(dst []byte, src []byte) error {
	return d.run(func(st uintptr) error {
		return d.k.MemcpyAsync(d.dev, ptr(dst), ptr(src), int64(min(len(dst), len(src))), HostToDevice, st)
	})
}
