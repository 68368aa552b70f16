package codec

// Golden vectors for the CUDA kernels (cuda/) and their CPU emulation
// (tests/cuda_emu/). The Go codec is the reference: this file defines a set
// of inputs, encodes them with the Go encoder, reduces them with the
// reduce-scatter's arithmetic (backend/reduce, in the order of
// backend/zcoll's fold) and writes the expected bytes to
// tests/cuda_emu/golden/golden.bin. The inputs themselves are not stored:
// both sides regenerate them from a splitmix64 stream with integer-only
// arithmetic (cudaGenerate below, gen_input in tests/cuda_emu/golden.h), and
// the file keeps a CRC-32C of each input so a generator mismatch is caught.
//
//	ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteCudaGolden ./backend/codec/
//
// rewrites the file; TestCudaGoldenUpToDate (part of the normal test run)
// fails when the committed file no longer matches what the Go codec
// produces, so a codec change cannot silently leave the GPU vectors stale.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/reduce"
)

const cudaGoldenPath = "../../tests/cuda_emu/golden/golden.bin"

// cudaSplitmix is splitmix64 (the C++ side has the same function).
type cudaSplitmix struct{ s uint64 }

func (r *cudaSplitmix) next() uint64 {
	r.s += 0x9E3779B97F4A7C15
	z := r.s
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

// cudaLayout is the bit layout of an element: the exponent field at
// [shift, shift+bits), the sign just above it, the mantissa below.
func cudaLayout(dt dtype.DType) (size int, shift, bits uint) {
	switch dt {
	case dtype.BFloat16:
		return 2, 7, 8
	case dtype.Float32:
		return 4, 23, 8
	case dtype.Float16:
		return 2, 10, 5
	case dtype.Float8E5M2:
		return 1, 2, 5
	case dtype.Float8E4M3FN:
		return 1, 3, 4
	}
	panic("cudaLayout: " + dt.String())
}

// cudaGenerate makes n elements of dt from the distribution spec
// ("gauss:C", "wide:C", "tight:C", "sparse:C", "special:C", "random",
// "const") with integer arithmetic only, so that C++ reproduces it exactly.
func cudaGenerate(dt dtype.DType, spec string, n int, seed uint64) []byte {
	size, shift, bits := cudaLayout(dt)
	maxf := int64(1)<<bits - 1
	mantMask := uint64(1)<<shift - 1
	signBit := shift + bits
	name, arg, _ := strings.Cut(spec, ":")
	center := int64(0)
	if arg != "" {
		c, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			panic(err)
		}
		center = c
	}
	r := cudaSplitmix{seed}
	clamp := func(f int64) uint64 {
		if f < 0 {
			f = 0
		}
		if f > maxf {
			f = maxf
		}
		return uint64(f)
	}
	constVal := r.next()
	out := make([]byte, n*size)
	for i := 0; i < n; i++ {
		x := r.next()
		sign := x & 1
		mant := x >> 32 & mantMask
		var field uint64
		switch name {
		case "gauss", "sparse", "special":
			// four uniform {0,1,2}: the 7 central fields hold 97.5 %,
			// as for the exponents of Gaussian data
			noise := int64(x>>8%3+x>>16%3+x>>24%3+x>>28%3) - 4
			field = clamp(center + noise)
		case "wide":
			noise := int64(x>>8%7+x>>16%7+x>>24%7) - 9
			field = clamp(center + noise)
		case "tight":
			noise := int64(x>>8%4+x>>16%4) - 3
			field = clamp(center + noise)
		}
		v := sign<<signBit | field<<shift | mant
		switch name {
		case "sparse":
			if x>>40%10 < 3 {
				v = sign << signBit
			}
		case "special":
			if x>>40%100 < 4 {
				switch x >> 48 % 6 {
				case 0: // signed zero
					v = sign << signBit
				case 1: // infinity (or the top binade for the fp8 formats)
					v = sign<<signBit | uint64(maxf)<<shift
				case 2: // NaN-like: top field, non-zero mantissa
					v = sign<<signBit | uint64(maxf)<<shift | (mant | 1)
				case 3: // subnormal
					v = sign<<signBit | mant
				case 4: // any field
					v = sign<<signBit | (x>>56&uint64(maxf))<<shift | mant
				case 5: // huge
					v = sign<<signBit | uint64(maxf-1)<<shift | mant
				}
			}
		case "random":
			v = x
		case "const":
			v = constVal
		case "gauss", "tight", "wide":
		default:
			panic("cudaGenerate: unknown distribution " + spec)
		}
		for b := 0; b < size; b++ {
			out[i*size+b] = byte(v >> (8 * b))
		}
	}
	return out
}

type cudaCodecCase struct {
	name   string
	dt     dtype.DType
	dist   string
	seed   uint64
	counts []int
}

type cudaReduceCase struct {
	name  string
	dt    dtype.DType
	op    reduce.Op
	n     int
	dists []string // one per source
	seed  uint64
}

func cudaCodecCases() []cudaCodecCase {
	bf, f16, f32 := dtype.BFloat16, dtype.Float16, dtype.Float32
	e4, e5 := dtype.Float8E4M3FN, dtype.Float8E5M2
	cs := []cudaCodecCase{
		{"bf16_gauss_2blocks", bf, "gauss:120", 1, []int{2*16384 + 1000}},
		{"bf16_sparse", bf, "sparse:118", 3, []int{5000}},
		{"bf16_special", bf, "special:125", 4, []int{6000}},
		{"bf16_wide", bf, "wide:126", 21, []int{3000}},
		{"bf16_random", bf, "random", 5, []int{3000}},
		{"bf16_const", bf, "const", 6, []int{1000}},
		{"bf16_tight", bf, "tight:100", 7, []int{4096}},
		{"bf16_chunks", bf, "gauss:115", 8, []int{1000, 3, 0, 5001, 2049, 77}},
		{"fp16_gauss", f16, "gauss:14", 9, []int{17000}},
		{"fp16_special", f16, "special:12", 10, []int{3001}},
		{"fp16_sparse", f16, "sparse:13", 11, []int{2500}},
		{"fp32_gauss_block", f32, "gauss:120", 12, []int{16400}},
		{"fp32_special", f32, "special:127", 13, []int{3000}},
		{"fp32_random", f32, "random", 14, []int{1000}},
		{"fp32_chunks", f32, "gauss:100", 15, []int{333, 0, 1200}},
		{"e4m3_gauss", e4, "gauss:7", 16, []int{5000}},
		{"e5m2_gauss", e5, "gauss:15", 17, []int{5000}},
		{"e4m3_special", e4, "special:8", 18, []int{2000}},
		{"e5m2_random", e5, "random", 19, []int{2000}},
		{"e5m2_chunks", e5, "sparse:14", 20, []int{7, 129, 1000}},
		// full blocks for decode's direct path: many escapes per thread
		// (wide), the residue planes, and R16
		{"bf16_wide_block", bf, "wide:126", 23, []int{1<<zip3BlockLog + 7}},
		{"e4m3_special_block", e4, "special:8", 24, []int{1<<zip3BlockLog + 100}},
		{"e5m2_gauss_block", e5, "gauss:15", 25, []int{2 << zip3BlockLog}},
		{"fp32_special_block", f32, "special:127", 26, []int{1 << zip3BlockLog}},
		// several full blocks per chunk, so that the look-back runs across
		// blocks coded by different CTAs (a chunk boundary in the last case)
		{"bf16_gauss_5blocks", bf, "gauss:120", 27, []int{5<<zip3BlockLog + 300}},
		{"fp16_gauss_4blocks", f16, "gauss:14", 28, []int{4<<zip3BlockLog + 1}},
		{"fp32_gauss_4blocks", f32, "gauss:120", 29, []int{4 << zip3BlockLog}},
		{"e4m3_gauss_4blocks", e4, "gauss:7", 30, []int{4 << zip3BlockLog}},
		{"bf16_wide_chunks_blocks", bf, "wide:126", 31, []int{3 << zip3BlockLog, 4<<zip3BlockLog + 5}},
	}
	// more chunks than one kernel launch takes (48): an all-to-all over 60 ranks
	many := make([]int, 60)
	for i := range many {
		many[i] = i * 577 % 300
	}
	cs = append(cs, cudaCodecCase{"bf16_many_chunks", bf, "gauss:119", 22, many})
	// small sizes around the group (32), array (128), tile (2048) boundaries
	for i, n := range []int{0, 1, 31, 32, 33, 127, 128, 129, 2047, 2049, 4100} {
		cs = append(cs, cudaCodecCase{fmt.Sprintf("bf16_n%d", n), bf, "gauss:121", uint64(100 + i), []int{n}})
	}
	return cs
}

func cudaReduceCases() []cudaReduceCase {
	bf, f16, f32 := dtype.BFloat16, dtype.Float16, dtype.Float32
	e4, e5 := dtype.Float8E4M3FN, dtype.Float8E5M2
	return []cudaReduceCase{
		// source 1 is incompressible: its frame falls back to raw
		{"r_bf16_sum3", bf, reduce.Sum, 16500, []string{"gauss:120", "random", "gauss:119"}, 200},
		{"r_bf16_sum2_special", bf, reduce.Sum, 3000, []string{"special:126", "special:127"}, 201},
		{"r_bf16_sum1", bf, reduce.Sum, 1000, []string{"special:120"}, 202},
		{"r_bf16_prod3", bf, reduce.Product, 2000, []string{"tight:127", "tight:127", "special:126"}, 203},
		{"r_fp16_sum3", f16, reduce.Sum, 2000, []string{"gauss:14", "special:15", "gauss:13"}, 204},
		{"r_fp32_sum4", f32, reduce.Sum, 1500, []string{"special:127", "gauss:126", "special:125", "gauss:127"}, 205},
		{"r_e4m3_sum4", e4, reduce.Sum, 3000, []string{"gauss:7", "gauss:8", "special:7", "gauss:6"}, 206},
		{"r_e5m2_sum3", e5, reduce.Sum, 3000, []string{"special:15", "gauss:14", "gauss:15"}, 207},
		{"r_fp16_prod2", f16, reduce.Product, 1200, []string{"gauss:15", "special:15"}, 208},
		// full blocks, for decode+reduce's direct path (every block but a tail)
		{"r_bf16_sum4_blocks", bf, reduce.Sum, 3<<zip3BlockLog + 77, []string{"gauss:120", "wide:126", "special:125", "gauss:119"}, 209},
		{"r_bf16_prod3_blocks", bf, reduce.Product, 2 << zip3BlockLog, []string{"tight:127", "tight:127", "special:126"}, 210},
		{"r_fp16_sum3_blocks", f16, reduce.Sum, 2<<zip3BlockLog + 1, []string{"gauss:14", "special:12", "sparse:13"}, 211},
		{"r_fp32_sum3_blocks", f32, reduce.Sum, 2<<zip3BlockLog + 5, []string{"special:127", "gauss:126", "gauss:120"}, 212},
		{"r_e4m3_sum3_blocks", e4, reduce.Sum, 2 << zip3BlockLog, []string{"gauss:7", "special:8", "gauss:6"}, 213},
		{"r_e5m2_sum2_blocks", e5, reduce.Sum, 1<<zip3BlockLog + 9, []string{"gauss:15", "special:15"}, 214},
	}
}

// cudaFold reduces srcs in rank order exactly as backend/zcoll's fold.
func cudaFold(dt dtype.DType, op reduce.Op, srcs [][]byte) []byte {
	out := make([]byte, len(srcs[0]))
	n := len(srcs)
	switch {
	case n == 1:
		copy(out, srcs[0])
	case n == 2:
		reduce.Reduce3(dt, op, out, srcs[0], srcs[1])
	case reduce.Accumulable(dt, op):
		acc := make([]float32, len(out)/dt.Size())
		reduce.AccumInit(dt, op, acc, srcs[0], srcs[1])
		for i := 2; i < n-1; i++ {
			reduce.Accum(dt, op, acc, srcs[i])
		}
		reduce.AccumFinish(dt, op, out, acc, srcs[n-1])
	default:
		reduce.Reduce3(dt, op, out, srcs[0], srcs[1])
		for i := 2; i < n; i++ {
			reduce.Reduce(dt, op, out, srcs[i])
		}
	}
	return out
}

func cudaErrClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrChecksum):
		return "checksum"
	case errors.Is(err, ErrTruncated):
		return "truncated"
	case errors.Is(err, ErrVersion):
		return "version"
	case errors.Is(err, ErrSize):
		return "size"
	case errors.Is(err, ErrDType):
		return "dtype"
	case errors.Is(err, ErrKind):
		return "kind"
	case errors.Is(err, ErrCorrupt):
		return "corrupt"
	}
	return "other"
}

type goldenWriter struct {
	buf   bytes.Buffer
	names map[string]bool
}

func (g *goldenWriter) add(name string, data []byte) {
	if g.names[name] {
		panic("duplicate golden record " + name)
	}
	g.names[name] = true
	var h [2]byte
	binary.LittleEndian.PutUint16(h[:], uint16(len(name)))
	g.buf.Write(h[:])
	g.buf.WriteString(name)
	var l [8]byte
	binary.LittleEndian.PutUint64(l[:], uint64(len(data)))
	g.buf.Write(l[:])
	g.buf.Write(data)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// buildCudaGolden returns the golden file's bytes.
func buildCudaGolden(t testing.TB) []byte {
	g := &goldenWriter{names: map[string]bool{}}
	g.buf.WriteString("ZCGOLD1\n")
	var e Encoder
	var d Decoder
	var flips []string
	for _, c := range cudaCodecCases() {
		total := 0
		for _, n := range c.counts {
			total += n
		}
		size := c.dt.Size()
		src := cudaGenerate(c.dt, c.dist, total, c.seed)
		g.add(c.name+"/meta", []byte(fmt.Sprintf("op=codec dtype=%d dist=%s seed=%d counts=%s",
			c.dt, c.dist, c.seed, joinInts(c.counts))))
		g.add(c.name+"/crc", le32(crc32c.Checksum(src)))
		off := 0
		for k, n := range c.counts {
			chunk := src[off*size : (off+n)*size]
			off += n
			frame, err := e.Encode(nil, chunk, c.dt, Zip3)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			g.add(fmt.Sprintf("%s/frame/%d", c.name, k), frame)
			st, err := e.EncodeStatic(nil, chunk, c.dt, Zip3)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			dyn, err := e.EncodeDynamic(nil)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if Kind(frame[5]) == Zip3 {
				if !bytes.Equal(frame[HeaderLen:], append(append([]byte{}, st...), dyn...)) {
					t.Fatalf("%s: split parts differ from the frame", c.name)
				}
			} else {
				// the frame fell back to raw; the split parts are still zip3
				g.add(fmt.Sprintf("%s/static/%d", c.name, k), st)
				g.add(fmt.Sprintf("%s/dynamic/%d", c.name, k), dyn)
			}
			// single-bit corruptions with the Go decoder's verdict
			if len(frame) > 32 && (c.name == "bf16_gauss_2blocks" || c.name == "fp16_special" ||
				c.name == "e4m3_gauss" || c.name == "fp32_special" || (c.name == "bf16_chunks" && k == 3)) {
				r := cudaSplitmix{c.seed * 7919}
				out := make([]byte, len(chunk))
				for j := 0; j < 24; j++ {
					pos := int(r.next() % uint64(len(frame)))
					if j < 3 { // always hit the header, the index and the dynamic part
						pos = []int{int(r.next() % 32), 32 + int(r.next()%16), len(frame) - 1 - int(r.next()%64)}[j]
					}
					bit := uint(r.next() % 8)
					bad := append([]byte{}, frame...)
					bad[pos] ^= 1 << bit
					_, err := d.Decode(out, bad)
					flips = append(flips, fmt.Sprintf("case=%s chunk=%d byte=%d bit=%d err=%s", c.name, k, pos, bit, cudaErrClass(err)))
				}
			}
		}
	}
	for _, c := range cudaReduceCases() {
		srcs := make([][]byte, len(c.dists))
		kinds := make([]string, len(c.dists))
		for i, dist := range c.dists {
			srcs[i] = cudaGenerate(c.dt, dist, c.n, c.seed+uint64(i)*1000)
			frame, err := e.Encode(nil, srcs[i], c.dt, Zip3)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			kinds[i] = Kind(frame[5]).String()
			g.add(fmt.Sprintf("%s/frame/%d", c.name, i), frame)
			g.add(fmt.Sprintf("%s/crc/%d", c.name, i), le32(crc32c.Checksum(srcs[i])))
		}
		g.add(c.name+"/meta", []byte(fmt.Sprintf("op=reduce dtype=%d rop=%d n=%d seed=%d dists=%s kinds=%s",
			c.dt, c.op, c.n, c.seed, strings.Join(c.dists, ","), strings.Join(kinds, ","))))
		g.add(c.name+"/out", cudaFold(c.dt, c.op, srcs))
	}
	sort.Strings(flips) // stable text regardless of case order
	g.add("flips", []byte(strings.Join(flips, "\n")+"\n"))
	return g.buf.Bytes()
}

func TestWriteCudaGolden(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_GOLDEN") != "1" {
		t.Skip("set ZIPCCL_WRITE_GOLDEN=1 to rewrite " + cudaGoldenPath)
	}
	data := buildCudaGolden(t)
	if err := os.MkdirAll(filepath.Dir(cudaGoldenPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cudaGoldenPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", cudaGoldenPath, len(data))
}

func TestCudaGoldenUpToDate(t *testing.T) {
	want, err := os.ReadFile(cudaGoldenPath)
	if errors.Is(err, os.ErrNotExist) {
		t.Skip(cudaGoldenPath + " not present")
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := buildCudaGolden(t); !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: the Go codec now writes different bytes; regenerate with "+
			"ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteCudaGolden ./backend/codec/ and rerun make test-cuda-emu", cudaGoldenPath)
	}
}

// TestCudaGenerateDistributions checks that the generator exercises what
// the golden cases are meant to (escapes, both window modes, raw fallback).
func TestCudaGenerateDistributions(t *testing.T) {
	var e Encoder
	check := func(dt dtype.DType, dist string, wantKind Kind, wantMode int) {
		src := cudaGenerate(dt, dist, 4096, 1)
		frame, err := e.Encode(nil, src, dt, Zip3)
		if err != nil {
			t.Fatal(err)
		}
		if Kind(frame[5]) != wantKind {
			t.Errorf("%v %s: kind %v, want %v", dt, dist, Kind(frame[5]), wantKind)
		}
		if wantMode >= 0 && int(frame[32+8]) != wantMode {
			t.Errorf("%v %s: window mode %d, want %d", dt, dist, frame[32+8], wantMode)
		}
	}
	check(dtype.BFloat16, "gauss:120", Zip3, 0)
	check(dtype.BFloat16, "sparse:118", Zip3, 1)
	check(dtype.BFloat16, "random", Raw, -1)
	check(dtype.Float32, "random", Raw, -1)
	check(dtype.Float16, "gauss:14", Zip3, -1)
}
