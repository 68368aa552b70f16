// Package codecbench measures the codecs on one buffer: a same-size memcpy
// baseline, encode and decode of every codec kind (throughput counted in
// input bytes, and ratio), klauspost/compress huff0 on the coded symbol
// stream alone, zstd (fastest) on the raw bytes, and the symbol entropy with
// its entropy-bound ratio. Rows are plain structs with JSON tags (the C ABI
// returns them as JSON).
package codecbench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/klauspost/compress/huff0"
	"github.com/klauspost/compress/zstd"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/bufs"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

// Options tunes a run. The zero value measures everything with defaults.
type Options struct {
	Kinds   []codec.Kind  // codec kinds to measure; default Raw, Zip3, Huff, Auto
	Rounds  int           // timing rounds per measurement, best kept; default 5
	MinTime time.Duration // minimum time per round; default 50ms
	// SkipExternal leaves out huff0 and zstd.
	SkipExternal bool
}

// Row is one measurement.
type Row struct {
	Name        string  `json:"name"`            // memcpy, raw, zip3, huff, auto, huff0-4x, zstd-fastest, entropy
	Op          string  `json:"op"`              // copy, encode, decode, bound
	DType       string  `json:"dtype"`           // element type
	Kind        string  `json:"kind,omitempty"`  // kind actually used (auto resolves)
	Bytes       int     `json:"bytes"`           // input (raw) bytes
	Encoded     int     `json:"encoded_bytes"`   // encoded bytes (frame, or equivalent)
	Ratio       float64 `json:"ratio"`           // Bytes / Encoded
	GBps        float64 `json:"gbps"`            // wall-clock throughput, input bytes per ns
	CPUGBps     float64 `json:"cpu_gbps"`        // throughput per CPU second of this thread
	NsPerOp     float64 `json:"ns_per_op"`       // best wall time of one operation
	VsMemcpy    float64 `json:"vs_memcpy"`       // GBps / memcpy GBps of the same run
	VsMemcpyCPU float64 `json:"vs_memcpy_cpu"`   // CPUGBps / memcpy CPUGBps
	Bits        float64 `json:"bits,omitempty"`  // entropy rows: bits per coded symbol
	Error       string  `json:"error,omitempty"` // set if the measurement failed
	Note        string  `json:"note,omitempty"`
}

type timing struct{ wall, cpu time.Duration }

// timers holds the measurements of one buffer and runs their rounds
// interleaved: round r of each before round r+1 of any. A burst of load
// from elsewhere on the machine then spoils one round of every
// measurement instead of every round of one, and the best round of each
// is kept. Each round starts with an untimed call, since the measurements
// before it have evicted this one's data.
type timers struct {
	fns  []func()
	best []*timing
}

// add registers fn and returns where its best per-call times will be.
func (t *timers) add(fn func()) *timing {
	b := &timing{time.Hour, time.Hour}
	t.fns, t.best = append(t.fns, fn), append(t.best, b)
	return b
}

func (t *timers) run(o *Options) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for r := 0; r < o.Rounds; r++ {
		for i, fn := range t.fns {
			fn()
			n := 0
			w0, c0 := time.Now(), threadCPU()
			for {
				fn()
				n++
				if time.Since(w0) >= o.MinTime {
					break
				}
			}
			w, c := time.Since(w0)/time.Duration(n), (threadCPU()-c0)/time.Duration(n)
			b := t.best[i]
			b.wall = min(b.wall, w)
			if c > 0 {
				b.cpu = min(b.cpu, c)
			}
		}
	}
}

func gbps(n int, d time.Duration) float64 {
	if d <= 0 || d == time.Hour {
		return 0
	}
	return float64(n) / float64(d.Nanoseconds())
}

// Run measures data (len(data) a multiple of dt.Size()).
func Run(data []byte, dt dtype.DType, opts Options) []Row {
	o := opts
	if len(o.Kinds) == 0 {
		o.Kinds = []codec.Kind{codec.Raw, codec.Zip3, codec.Huff, codec.Auto}
	}
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	if o.MinTime <= 0 {
		o.MinTime = 50 * time.Millisecond
	}
	n := len(data)
	if !dt.Valid() || n%dt.Size() != 0 {
		return []Row{{Name: "input", DType: dt.String(), Bytes: n, Error: "data is not a whole number of elements of a valid dtype"}}
	}
	var t timers
	cp := make([]byte, n)
	mt := t.add(func() { copy(cp, data) })
	// each measurement is checked once here; the timed calls share the
	// output buffers
	out := make([]byte, n)
	var enc []byte
	var later []func() []Row
	for _, k := range o.Kinds {
		var e codec.Encoder
		var d codec.Decoder
		frame, err := e.Encode(nil, data, dt, k)
		if err != nil {
			later = append(later, func() []Row {
				return []Row{{Name: k.String(), Op: "encode", DType: dt.String(), Bytes: n, Error: err.Error()}}
			})
			continue
		}
		used := e.Kind().String()
		if need := len(frame) + codec.MaxEncodedLen(n, dt); cap(enc) < need {
			enc = make([]byte, 0, need)
		}
		et := t.add(func() { enc, _ = e.Encode(enc[:0], data, dt, k) })
		var derr error
		if _, derr = d.Decode(out, frame); derr == nil && string(out) != string(data) {
			derr = errors.New("decoded bytes differ")
		}
		dtm := t.add(func() { d.Decode(out, frame) })
		later = append(later, func() []Row {
			r1 := Row{Name: k.String(), Op: "encode", DType: dt.String(), Kind: used, Bytes: n, Encoded: len(frame),
				Ratio: float64(n) / float64(len(frame)), GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds())}
			r2 := Row{Name: k.String(), Op: "decode", DType: dt.String(), Kind: used, Bytes: n, Encoded: len(frame),
				Ratio: float64(n) / float64(len(frame)), GBps: gbps(n, dtm.wall), CPUGBps: gbps(n, dtm.cpu), NsPerOp: float64(dtm.wall.Nanoseconds())}
			if derr != nil {
				r2.Error = derr.Error()
			}
			return []Row{r1, r2}
		})
	}
	syms, restBytes := symbols(data, dt)
	h := entropy(syms)
	bound := float64(n) / (float64(restBytes) + h*float64(len(syms))/8)
	later = append(later, func() []Row {
		return []Row{{Name: "entropy", Op: "bound", DType: dt.String(), Bytes: n, Ratio: bound, Bits: h,
			Note: "order-0 entropy of the coded symbol (exponent byte; fp16 high byte; fp8 whole byte), rest raw"}}
	})
	if !o.SkipExternal {
		later = append(later, huff0Rows(&t, syms, restBytes, n, dt), zstdRows(&t, data, dt))
	}
	if quant.Supported(dt) {
		later = append(later, fp8Rows(&t, data, dt))
	}
	t.run(&o)

	mem := Row{Name: "memcpy", Op: "copy", DType: dt.String(), Bytes: n, Encoded: n, Ratio: 1,
		GBps: gbps(n, mt.wall), CPUGBps: gbps(n, mt.cpu), NsPerOp: float64(mt.wall.Nanoseconds()), VsMemcpy: 1, VsMemcpyCPU: 1,
		Note: "baseline, same buffer; codec kernels: " + codec.Kernels()}
	rows := []Row{mem}
	for _, f := range later {
		for _, r := range f() {
			if mem.GBps > 0 {
				r.VsMemcpy = r.GBps / mem.GBps
			}
			if mem.CPUGBps > 0 {
				r.VsMemcpyCPU = r.CPUGBps / mem.CPUGBps
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// symbols extracts the coded symbol stream (as the huff kind codes it) and
// the number of bytes kept raw.
func symbols(data []byte, dt dtype.DType) ([]byte, int) {
	size := dt.Size()
	m := len(data) / size
	s := make([]byte, m)
	for i := range s {
		switch dt {
		case dtype.BFloat16:
			s[i] = byte(binary.LittleEndian.Uint16(data[2*i:]) >> 7)
		case dtype.Float32:
			s[i] = byte(binary.LittleEndian.Uint32(data[4*i:]) >> 23)
		case dtype.Float16:
			s[i] = data[2*i+1]
		case dtype.Float8E4M3FN, dtype.Float8E5M2:
			s[i] = data[i]
		default:
			s[i] = data[size*i+size-1] // top byte
		}
	}
	return s, len(data) - m
}

func entropy(s []byte) float64 {
	var hist [256]int
	for _, v := range s {
		hist[v]++
	}
	h := 0.0
	for _, c := range hist {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}

const huff0Chunk = 1 << 16

func huff0Rows(t *timers, syms []byte, rest, n int, dt dtype.DType) func() []Row {
	s := huff0.Scratch{Reuse: huff0.ReusePolicyNone}
	type chunk struct {
		raw  []byte
		comp []byte // nil: stored raw
		rle  bool
	}
	var chunks []chunk
	total := 0
	for i := 0; i < len(syms); i += huff0Chunk {
		c := syms[i:min(i+huff0Chunk, len(syms))]
		out, _, err := huff0.Compress4X(c, &s)
		switch {
		case err == nil:
			chunks = append(chunks, chunk{raw: c, comp: append([]byte{}, out...)})
			total += len(out)
		case errors.Is(err, huff0.ErrUseRLE):
			chunks = append(chunks, chunk{raw: c, rle: true})
			total++
		case errors.Is(err, huff0.ErrIncompressible):
			chunks = append(chunks, chunk{raw: c})
			total += len(c)
		default:
			return func() []Row {
				return []Row{{Name: "huff0-4x", Op: "encode", DType: dt.String(), Bytes: n, Error: err.Error()}}
			}
		}
	}
	enc := rest + total
	et := t.add(func() {
		for i := 0; i < len(syms); i += huff0Chunk {
			huff0.Compress4X(syms[i:min(i+huff0Chunk, len(syms))], &s)
		}
	})
	out := make([]byte, huff0Chunk)
	decode := func() error {
		for _, c := range chunks {
			if c.comp == nil {
				continue
			}
			s2, rem, err := huff0.ReadTable(c.comp, &s)
			if err != nil {
				return err
			}
			if _, err := s2.Decoder().Decompress4X(out[:len(c.raw):len(c.raw)], rem); err != nil {
				return err
			}
		}
		return nil
	}
	derr := decode()
	dtm := t.add(func() { decode() })
	return func() []Row {
		note := "exponent/symbol stream only, 64 Ki-symbol chunks; throughput in input bytes of the tensor"
		r1 := Row{Name: "huff0-4x", Op: "encode", DType: dt.String(), Bytes: n, Encoded: enc, Ratio: float64(n) / float64(enc),
			GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds()), Note: note}
		r2 := Row{Name: "huff0-4x", Op: "decode", DType: dt.String(), Bytes: n, Encoded: enc, Ratio: float64(n) / float64(enc),
			GBps: gbps(n, dtm.wall), CPUGBps: gbps(n, dtm.cpu), NsPerOp: float64(dtm.wall.Nanoseconds()), Note: note}
		if derr != nil {
			r2.Error = derr.Error()
		}
		return []Row{r1, r2}
	}
}

func zstdRows(t *timers, data []byte, dt dtype.DType) func() []Row {
	n := len(data)
	fail := func(op string, err error) func() []Row {
		return func() []Row { return []Row{{Name: "zstd-fastest", Op: op, Error: err.Error()}} }
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return fail("encode", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		enc.Close()
		return fail("decode", err)
	}
	comp := enc.EncodeAll(data, nil)
	buf := make([]byte, 0, len(comp)+n/8+1024)
	et := t.add(func() { buf = enc.EncodeAll(data, buf[:0]) })
	out, derr := dec.DecodeAll(comp, make([]byte, 0, n))
	if derr == nil && string(out) != string(data) {
		derr = errors.New("zstd round trip differs")
	}
	dtm := t.add(func() { out, _ = dec.DecodeAll(comp, out[:0]) })
	return func() []Row {
		enc.Close()
		dec.Close()
		r1 := Row{Name: "zstd-fastest", Op: "encode", DType: dt.String(), Bytes: n, Encoded: len(comp), Ratio: float64(n) / float64(len(comp)),
			GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds())}
		r2 := Row{Name: "zstd-fastest", Op: "decode", DType: dt.String(), Bytes: n, Encoded: len(comp), Ratio: float64(n) / float64(len(comp)),
			GBps: gbps(n, dtm.wall), CPUGBps: gbps(n, dtm.cpu), NsPerOp: float64(dtm.wall.Nanoseconds())}
		if derr != nil {
			r2.Error = derr.Error()
		}
		return []Row{r1, r2}
	}
}

// String formats a row for logs.
func (r Row) String() string {
	if r.Error != "" {
		return fmt.Sprintf("%-13s %-6s %-9s ERROR %s", r.Name, r.Op, r.DType, r.Error)
	}
	if r.Op == "bound" {
		return fmt.Sprintf("%-13s %-6s %-9s %.4f bits/symbol, bound ratio %.4f", r.Name, r.Op, r.DType, r.Bits, r.Ratio)
	}
	return fmt.Sprintf("%-13s %-6s %-9s ratio %.4f  %7.2f GB/s (cpu %7.2f)  %5.1f%% of memcpy (cpu %5.1f%%)",
		r.Name, r.Op, r.DType, r.Ratio, r.GBps, r.CPUGBps, 100*r.VsMemcpy, 100*r.VsMemcpyCPU)
}

// fp8Rows measures the lossy fp8 coding (package quant, TACO) of the same
// buffer: not a lossless codec, so its rows note the relative L2 error.
func fp8Rows(t *timers, data []byte, dt dtype.DType) func() []Row {
	n := len(data)
	numel := n / dt.Size()
	main := make([]byte, quant.MainLen(quant.FP8, numel, lossy.DefaultFP8Block))
	exact, err := quant.Encode(main, nil, data, dt, quant.FP8, lossy.DefaultFP8Block)
	if err != nil {
		return func() []Row {
			return []Row{{Name: "fp8", Op: "encode", DType: dt.String(), Bytes: n, Error: err.Error()}}
		}
	}
	out := make([]byte, n)
	derr := quant.Decode(out, main, exact, dt)
	coded := len(main) + len(exact)
	note := fmt.Sprintf("lossy: TACO's fp8, blocks of %d (docs/FORMAT.md 11); %s", lossy.DefaultFP8Block, relError(data, out, dt))
	var scratch []byte
	et := t.add(func() { scratch, _ = quant.Encode(main, scratch[:0], data, dt, quant.FP8, lossy.DefaultFP8Block) })
	dtm := t.add(func() { quant.Decode(out, main, exact, dt) })
	return func() []Row {
		row := func(op string, tm *timing) Row {
			return Row{Name: "fp8", Op: op, DType: dt.String(), Kind: "fp8", Bytes: n, Encoded: coded,
				Ratio: float64(n) / float64(coded), GBps: gbps(n, tm.wall), CPUGBps: gbps(n, tm.cpu),
				NsPerOp: float64(tm.wall.Nanoseconds()), Note: note}
		}
		r1, r2 := row("encode", et), row("decode", dtm)
		if derr != nil {
			r2.Error = derr.Error()
		}
		return []Row{r1, r2}
	}
}

// relError is the relative L2 error of got against want over their finite
// elements, as text.
func relError(want, got []byte, dt dtype.DType) string {
	w, g := make([]float32, len(want)/dt.Size()), make([]float32, len(got)/dt.Size())
	if dt == dtype.Float32 {
		copy(w, bufs.Float32s(want))
		copy(g, bufs.Float32s(got))
	} else {
		reduce.Widen(dt, w, want)
		reduce.Widen(dt, g, got)
	}
	var num, den float64
	for i, x := range w {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			continue
		}
		d := float64(g[i]) - float64(x)
		num, den = num+d*d, den+float64(x)*float64(x)
	}
	if den == 0 {
		return "relative L2 error 0"
	}
	return fmt.Sprintf("relative L2 error %.4f", math.Sqrt(num/den))
}
