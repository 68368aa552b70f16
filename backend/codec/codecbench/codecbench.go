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

// measure runs fn in rounds and returns the best per-call wall and CPU times.
func measure(o *Options, fn func()) timing {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fn() // warm up
	best := timing{time.Hour, time.Hour}
	for r := 0; r < o.Rounds; r++ {
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
		best.wall = min(best.wall, w)
		if c > 0 {
			best.cpu = min(best.cpu, c)
		}
	}
	return best
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
	var rows []Row
	if !dt.Valid() || n%dt.Size() != 0 {
		return []Row{{Name: "input", DType: dt.String(), Bytes: n, Error: "data is not a whole number of elements of a valid dtype"}}
	}
	// memcpy baseline
	cp := make([]byte, n)
	mt := measure(&o, func() { copy(cp, data) })
	mem := Row{Name: "memcpy", Op: "copy", DType: dt.String(), Bytes: n, Encoded: n, Ratio: 1,
		GBps: gbps(n, mt.wall), CPUGBps: gbps(n, mt.cpu), NsPerOp: float64(mt.wall.Nanoseconds()), VsMemcpy: 1, VsMemcpyCPU: 1,
		Note: "baseline, same buffer; codec kernels: " + codec.Kernels()}
	rows = append(rows, mem)
	rel := func(r *Row) {
		if mem.GBps > 0 {
			r.VsMemcpy = r.GBps / mem.GBps
		}
		if mem.CPUGBps > 0 {
			r.VsMemcpyCPU = r.CPUGBps / mem.CPUGBps
		}
	}
	for _, k := range o.Kinds {
		var e codec.Encoder
		var d codec.Decoder
		frame, err := e.Encode(nil, data, dt, k)
		if err != nil {
			rows = append(rows, Row{Name: k.String(), Op: "encode", DType: dt.String(), Bytes: n, Error: err.Error()})
			continue
		}
		used := e.Kind().String()
		buf := make([]byte, 0, len(frame)+codec.MaxEncodedLen(n, dt))
		et := measure(&o, func() { buf, _ = e.Encode(buf[:0], data, dt, k) })
		r := Row{Name: k.String(), Op: "encode", DType: dt.String(), Kind: used, Bytes: n, Encoded: len(frame),
			Ratio: float64(n) / float64(len(frame)), GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds())}
		rel(&r)
		rows = append(rows, r)
		out := make([]byte, n)
		var derr error
		dt2 := measure(&o, func() { _, derr = d.Decode(out, frame) })
		r = Row{Name: k.String(), Op: "decode", DType: dt.String(), Kind: used, Bytes: n, Encoded: len(frame),
			Ratio: float64(n) / float64(len(frame)), GBps: gbps(n, dt2.wall), CPUGBps: gbps(n, dt2.cpu), NsPerOp: float64(dt2.wall.Nanoseconds())}
		if derr != nil {
			r.Error = derr.Error()
		} else if string(out) != string(data) {
			r.Error = "decoded bytes differ"
		}
		rel(&r)
		rows = append(rows, r)
	}
	syms, restBytes := symbols(data, dt)
	h := entropy(syms)
	bound := float64(n) / (float64(restBytes) + h*float64(len(syms))/8)
	rows = append(rows, Row{Name: "entropy", Op: "bound", DType: dt.String(), Bytes: n, Ratio: bound, Bits: h,
		Note: "order-0 entropy of the coded symbol (exponent byte; fp16 high byte; fp8 whole byte), rest raw"})
	if !o.SkipExternal {
		rows = append(rows, huff0Rows(&o, syms, restBytes, n, dt, rel)...)
		rows = append(rows, zstdRows(&o, data, dt, rel)...)
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

func huff0Rows(o *Options, syms []byte, rest, n int, dt dtype.DType, rel func(*Row)) []Row {
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
			return []Row{{Name: "huff0-4x", Op: "encode", DType: dt.String(), Bytes: n, Error: err.Error()}}
		}
	}
	enc := rest + total
	et := measure(o, func() {
		for i := 0; i < len(syms); i += huff0Chunk {
			huff0.Compress4X(syms[i:min(i+huff0Chunk, len(syms))], &s)
		}
	})
	out := make([]byte, huff0Chunk)
	var derr error
	dtm := measure(o, func() {
		for _, c := range chunks {
			if c.comp == nil {
				continue
			}
			s2, rem, err := huff0.ReadTable(c.comp, &s)
			if err != nil {
				derr = err
				return
			}
			if _, err := s2.Decoder().Decompress4X(out[:len(c.raw):len(c.raw)], rem); err != nil {
				derr = err
				return
			}
		}
	})
	note := "exponent/symbol stream only, 64 Ki-symbol chunks; throughput in input bytes of the tensor"
	r1 := Row{Name: "huff0-4x", Op: "encode", DType: dt.String(), Bytes: n, Encoded: enc, Ratio: float64(n) / float64(enc),
		GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds()), Note: note}
	r2 := Row{Name: "huff0-4x", Op: "decode", DType: dt.String(), Bytes: n, Encoded: enc, Ratio: float64(n) / float64(enc),
		GBps: gbps(n, dtm.wall), CPUGBps: gbps(n, dtm.cpu), NsPerOp: float64(dtm.wall.Nanoseconds()), Note: note}
	if derr != nil {
		r2.Error = derr.Error()
	}
	rel(&r1)
	rel(&r2)
	return []Row{r1, r2}
}

func zstdRows(o *Options, data []byte, dt dtype.DType, rel func(*Row)) []Row {
	n := len(data)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return []Row{{Name: "zstd-fastest", Op: "encode", Error: err.Error()}}
	}
	defer enc.Close()
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return []Row{{Name: "zstd-fastest", Op: "decode", Error: err.Error()}}
	}
	defer dec.Close()
	comp := enc.EncodeAll(data, nil)
	buf := make([]byte, 0, len(comp)+n/8+1024)
	et := measure(o, func() { buf = enc.EncodeAll(data, buf[:0]) })
	out := make([]byte, 0, n)
	var derr error
	dtm := measure(o, func() { out, derr = dec.DecodeAll(comp, out[:0]) })
	r1 := Row{Name: "zstd-fastest", Op: "encode", DType: dt.String(), Bytes: n, Encoded: len(comp), Ratio: float64(n) / float64(len(comp)),
		GBps: gbps(n, et.wall), CPUGBps: gbps(n, et.cpu), NsPerOp: float64(et.wall.Nanoseconds())}
	r2 := Row{Name: "zstd-fastest", Op: "decode", DType: dt.String(), Bytes: n, Encoded: len(comp), Ratio: float64(n) / float64(len(comp)),
		GBps: gbps(n, dtm.wall), CPUGBps: gbps(n, dtm.cpu), NsPerOp: float64(dtm.wall.Nanoseconds())}
	if derr != nil {
		r2.Error = derr.Error()
	} else if string(out) != string(data) {
		r2.Error = "zstd round trip differs"
	}
	rel(&r1)
	rel(&r2)
	return []Row{r1, r2}
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
