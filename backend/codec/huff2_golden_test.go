package codec

// Golden huff2 frames, aligned and packed (testdata/huff2_golden.bin), made
// by the Go encoder from inputs that cudaGenerate regenerates with integer
// arithmetic, and decoded here by refDecodeHuff2: a bit-at-a-time decoder
// written from docs/FORMAT.md sections 4a and 4b alone (its own canonical
// codes, plane merge and CRC-32C from hash/crc32), sharing no code with the
// codec's decoder.
//
//	ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteHuff2Golden ./backend/codec/
//
// rewrites the file; TestHuff2GoldenUpToDate fails when the encoder no
// longer writes the committed bytes.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sort"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

const huff2GoldenPath = "testdata/huff2_golden.bin"

type huff2Case struct {
	name string
	dt   dtype.DType
	dist string // cudaGenerate's, or "f16in32:C" (gauss:C with bits 12..0 cleared)
	seed uint64
	n    int
}

func huff2Cases() []huff2Case {
	bf, f16, f32 := dtype.BFloat16, dtype.Float16, dtype.Float32
	b := 1 << huff2BlockLog
	return []huff2Case{
		{"bf16_gauss_tail", bf, "gauss:120", 1, b + 1000},
		{"bf16_special", bf, "special:125", 2, 5000},
		{"bf16_const", bf, "const", 3, 3000},
		{"bf16_one", bf, "gauss:120", 4, 1},
		{"fp16_gauss", f16, "gauss:14", 5, 20000},
		{"fp16_special", f16, "special:12", 6, 3001},
		{"fp32_gauss", f32, "gauss:120", 7, 20000},
		{"fp32_special", f32, "special:127", 8, 4000},
		{"fp32_random", f32, "random", 9, 1000},
		{"fp32_f16in32", f32, "f16in32:118", 10, b + 3},
		{"e4m3_gauss", dtype.Float8E4M3FN, "gauss:7", 11, 5000},
		{"e5m2_sparse", dtype.Float8E5M2, "sparse:14", 12, 700},
		{"fp16_tails", f16, "f16tails:14", 13, b + 777},
	}
}

func huff2Input(c huff2Case) []byte {
	var arg string
	if _, err := fmt.Sscanf(c.dist, "f16in32:%s", &arg); err == nil {
		src := cudaGenerate(c.dt, "gauss:"+arg, c.n, c.seed)
		for i := 0; i < c.n; i++ {
			binary.LittleEndian.PutUint32(src[4*i:], binary.LittleEndian.Uint32(src[4*i:])&^0x1fff)
		}
		return src
	}
	if _, err := fmt.Sscanf(c.dist, "f16tails:%s", &arg); err == nil {
		// about one element in 100 gets a random finite exponent: wide,
		// sparse tails that the encoder sends through the escape
		src := cudaGenerate(c.dt, "gauss:"+arg, c.n, c.seed)
		r := cudaSplitmix{c.seed * 104729}
		for i := 0; i < c.n; i++ {
			if x := r.next(); x%100 == 0 {
				v := binary.LittleEndian.Uint16(src[2*i:])&^0x7c00 | uint16(x>>8%31)<<10
				binary.LittleEndian.PutUint16(src[2*i:], v)
			}
		}
		return src
	}
	return cudaGenerate(c.dt, c.dist, c.n, c.seed)
}

func buildHuff2Golden(t testing.TB) []byte {
	g := &goldenWriter{names: map[string]bool{}}
	g.buf.WriteString("ZCH2GLD1\n")
	var e Encoder
	for _, c := range huff2Cases() {
		src := huff2Input(c)
		frame, err := e.Encode(nil, src, c.dt, Huff2)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g.add(c.name+"/meta", []byte(fmt.Sprintf("dtype=%d dist=%s seed=%d n=%d kind=%v", c.dt, c.dist, c.seed, c.n, e.Kind())))
		g.add(c.name+"/frame", frame)
	}
	for _, c := range huff2Cases() {
		frame, err := e.Encode(nil, huff2Input(c), c.dt, Huff2Packed)
		if err != nil {
			t.Fatalf("%s packed: %v", c.name, err)
		}
		g.add(c.name+"/packed", frame)
	}
	return g.buf.Bytes()
}

func TestWriteHuff2Golden(t *testing.T) {
	if os.Getenv("ZIPCCL_WRITE_GOLDEN") != "1" {
		t.Skip("set ZIPCCL_WRITE_GOLDEN=1 to rewrite " + huff2GoldenPath)
	}
	data := buildHuff2Golden(t)
	if err := os.WriteFile(huff2GoldenPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", huff2GoldenPath, len(data))
}

func readGolden(t *testing.T, path, magic string) map[string][]byte {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(magic)) {
		t.Fatalf("%s: bad magic", path)
	}
	out := map[string][]byte{}
	for p := data[len(magic):]; len(p) > 0; {
		nl := int(binary.LittleEndian.Uint16(p))
		name := string(p[2 : 2+nl])
		dl := int(binary.LittleEndian.Uint64(p[2+nl:]))
		out[name] = p[10+nl : 10+nl+dl]
		p = p[10+nl+dl:]
	}
	return out
}

func TestHuff2GoldenUpToDate(t *testing.T) {
	want, err := os.ReadFile(huff2GoldenPath)
	if err != nil {
		t.Fatal(err)
	}
	if got := buildHuff2Golden(t); !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: the encoder now writes different huff2 bytes; check the change is intended, "+
			"then regenerate with ZIPCCL_WRITE_GOLDEN=1 go test -run TestWriteHuff2Golden ./backend/codec/", huff2GoldenPath)
	}
}

// TestHuff2GoldenDecode decodes every committed frame with the reference
// decoder and the codec's and compares both with the regenerated input.
func TestHuff2GoldenDecode(t *testing.T) {
	g := readGolden(t, huff2GoldenPath, "ZCH2GLD1\n")
	for _, layout := range []string{"frame", "packed"} {
		var total refStats
		for _, c := range huff2Cases() {
			name := c.name + "/" + layout
			frame := g[name]
			src := huff2Input(c)
			ref, st, err := refDecodeHuff2(frame)
			if err != nil {
				t.Fatalf("%s: reference decoder: %v", name, err)
			}
			if !bytes.Equal(ref, src) {
				t.Fatalf("%s: reference decoder output differs from the input", name)
			}
			total.codedResidue += st.codedResidue
			total.escapes += st.escapes
			out := make([]byte, len(src))
			var d Decoder
			if _, err := d.Decode(out, frame); err != nil || !bytes.Equal(out, src) {
				t.Fatalf("%s: codec decoder: %v", name, err)
			}
		}
		if total.codedResidue == 0 {
			t.Fatalf("no golden %s has a Huffman-coded residue plane", layout)
		}
		if total.escapes == 0 {
			t.Fatalf("no golden %s has an escaped symbol", layout)
		}
	}
}

// refBits reads a little-endian bit stream one bit at a time.
type refBits struct {
	b   []byte
	pos int // bit position
}

func (r *refBits) bit() (uint32, error) {
	if r.pos >= 8*len(r.b) {
		return 0, errors.New("stream overrun")
	}
	v := uint32(r.b[r.pos/8]>>(r.pos%8)) & 1
	r.pos++
	return v, nil
}

// refRecord decodes one huff record (FORMAT.md 4.2) of n symbols, whose
// stream lengths are lw bytes each (4, or 2 in a packed frame); it returns
// the symbols, the record length, whether it was Huffman-coded and how many
// symbols were escaped.
func refRecord(src []byte, n, lw int) ([]byte, int, bool, int, error) {
	if len(src) < 1 {
		return nil, 0, false, 0, errors.New("empty record")
	}
	switch src[0] {
	case 0:
		if len(src) < 1+n {
			return nil, 0, false, 0, errors.New("short raw record")
		}
		return append([]byte{}, src[1:1+n]...), 1 + n, false, 0, nil
	case 2:
		return bytes.Repeat(src[1:2], n), 2, false, 0, nil
	case 1:
	default:
		return nil, 0, false, 0, fmt.Errorf("mode %d", src[0])
	}
	lo, nwin := int(src[1]), int(src[2])+1
	lens := make([]int, nwin+1) // index nwin: the escape
	for i := range lens {
		lens[i] = int(src[3+i/2]>>(4*(i%2))) & 15
	}
	p := 3 + (nwin+2)/2
	// canonical codes: by (length, index), escape last among equals
	order := make([]int, 0, nwin+1)
	for i, l := range lens {
		if l > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return lens[order[a]] < lens[order[b]] })
	type key struct{ l, code int }
	codeOf := map[key]int{}
	code, prevLen := 0, 0
	for j, i := range order {
		if j > 0 {
			code++
		}
		code <<= lens[i] - prevLen
		prevLen = lens[i]
		codeOf[key{lens[i], code}] = i
	}
	var sl [4]int
	for k := range sl {
		for j := lw - 1; j >= 0; j-- {
			sl[k] = sl[k]<<8 | int(src[p+lw*k+j])
		}
	}
	p += 4 * lw
	out := make([]byte, 0, n)
	escapes := 0
	for k := 0; k < 4; k++ {
		r := refBits{b: src[p : p+sl[k]]}
		for cnt := (k+1)*n/4 - k*n/4; cnt > 0; cnt-- {
			c, l := 0, 0
			for {
				b, err := r.bit()
				if err != nil {
					return nil, 0, false, 0, err
				}
				c, l = c<<1|int(b), l+1
				if i, ok := codeOf[key{l, c}]; ok {
					if i < nwin {
						out = append(out, byte(lo+i))
					} else {
						var s uint32
						for j := 0; j < 8; j++ {
							b, err := r.bit()
							if err != nil {
								return nil, 0, false, 0, err
							}
							s |= b << j
						}
						out = append(out, byte(s))
						escapes++
					}
					break
				}
				if l > 11 {
					return nil, 0, false, 0, errors.New("no such code")
				}
			}
		}
		if (r.pos+7)/8 != sl[k] {
			return nil, 0, false, 0, fmt.Errorf("stream %d: %d bits used of %d bytes", k, r.pos, sl[k])
		}
		p += sl[k]
	}
	return out, p, true, escapes, nil
}

// refStats counts what a reference decode went through, so that the golden
// test can require every path to be covered.
type refStats struct {
	codedResidue int // Huffman-coded planes past plane 0
	escapes      int // escaped symbols
}

// refDecodeHuff2 decodes a huff2 frame, aligned (kind 3) or packed (kind
// 4); it returns the tensor bytes and what the decode went through.
func refDecodeHuff2(frame []byte) ([]byte, refStats, error) {
	var st refStats
	if string(frame[:4]) != "ZCCF" || frame[4] != 1 || (frame[5] != 3 && frame[5] != 4) || frame[7] != 16 {
		return nil, st, errors.New("not a huff2 frame")
	}
	packed := frame[5] == 4
	entry, lw := 16, 4 // index entry and stream length bytes
	if packed {
		entry, lw = 4, 2
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	dt := dtype.DType(frame[6])
	numel := int(binary.LittleEndian.Uint64(frame[8:]))
	const B = 1 << 16
	nblocks := (numel + B - 1) / B
	index := frame[32:]
	indexLen := (entry*nblocks + 127) / 128 * 128
	if packed {
		indexLen = entry * nblocks
	}
	dynLen := int(binary.LittleEndian.Uint64(frame[16:]))
	dyn := frame[32+indexLen : 32+indexLen+dynLen]
	nplanes := map[dtype.DType]int{dtype.Float32: 4, dtype.BFloat16: 2, dtype.Float16: 2}[dt]
	if nplanes == 0 {
		nplanes = 1
	}
	size := dt.Size()
	out := make([]byte, 0, numel*size)
	for blk := 0; blk < nblocks; blk++ {
		n := min(B, numel-blk*B)
		pl := make([][]byte, nplanes)
		for i := range pl {
			s, used, huffman, esc, err := refRecord(dyn, n, lw)
			if err != nil {
				return nil, st, fmt.Errorf("block %d plane %d: %w", blk, i, err)
			}
			if huffman && i > 0 {
				st.codedResidue++
			}
			st.escapes += esc
			pl[i], dyn = s, dyn[used:]
		}
		start := len(out)
		for j := 0; j < n; j++ {
			switch dt {
			case dtype.BFloat16, dtype.Float16:
				v := uint16(pl[1][j]&0x80)<<8 | uint16(pl[0][j])<<7 | uint16(pl[1][j]&0x7f)
				out = binary.LittleEndian.AppendUint16(out, v)
			case dtype.Float32:
				v := uint32(pl[1][j]&0x80)<<24 | uint32(pl[0][j])<<23 | uint32(pl[1][j]&0x7f)<<16 |
					uint32(pl[2][j])<<8 | uint32(pl[3][j])
				out = binary.LittleEndian.AppendUint32(out, v)
			default:
				out = append(out, pl[0][j])
			}
		}
		if crc32.Checksum(out[start:], castagnoli) != binary.LittleEndian.Uint32(index[entry*blk:]) {
			return nil, st, fmt.Errorf("block %d: crc", blk)
		}
	}
	if packed && len(dyn) != 0 {
		return nil, st, fmt.Errorf("%d bytes after the records of a packed frame", len(dyn))
	}
	return out, st, nil
}
