package codec

import (
	"encoding/binary"

	"github.com/zipccl/zipccl/backend/codec/huff"
	"github.com/zipccl/zipccl/backend/codec/internal/crc32c"
	"github.com/zipccl/zipccl/backend/codec/zip3"
	"github.com/zipccl/zipccl/backend/dtype"
)

// Sampling for the estimates: estChunks runs of estRun elements spread evenly
// over the tensor (all of it when smaller).
const (
	estChunks = 16
	estRun    = 256
)

// sampleBuf holds a gathered sample.
type sampleBuf [estChunks * estRun * 4]byte

// gather copies the sampled runs of src into buf and returns them and the
// element count.
func gather(src []byte, size, numel int, buf *sampleBuf) ([]byte, int) {
	if numel <= estChunks*estRun {
		return src[:numel*size], numel
	}
	stride := numel / estChunks
	run := estRun * size
	for c := 0; c < estChunks; c++ {
		copy(buf[c*run:(c+1)*run], src[c*stride*size:])
	}
	return buf[:estChunks*run], estChunks * estRun
}

// EstimateRatio returns a cheap estimate (from a sample of at most 4096
// elements) of the ratio len(src) / frame length that kind k would reach,
// for the adaptive switcher and zipccl.codec.estimate_ratio. Raw and
// uncoded dtypes estimate the raw frame. Auto estimates the kind
// ChooseKind picks.
func EstimateRatio(src []byte, dt dtype.DType, k Kind) float64 {
	if !dt.Valid() || len(src) < dt.Size() {
		return 1
	}
	if k == Auto {
		k = ChooseKind(src, dt)
	}
	f, ok := zformat(dt)
	size := dt.Size()
	numel := len(src) / size
	src = src[:numel*size]
	rawBits := float64(8 * size)
	over := float64(MaxEncodedLen(len(src), dt)) / float64(len(src)) // raw frame overhead
	if !ok || k == Raw {
		return 1 / over
	}
	var buf sampleBuf
	s, m := gather(src, size, numel, &buf)
	var bits float64
	switch k {
	case Zip3:
		bits = zip3Bits(s, f, m)
	case Huff:
		bits = huffBits(s, f, m)
	case Huff2, Huff2Packed:
		bits = huff2Bits(s, f, m)
	default:
		return 1 / over
	}
	// add the fixed per-frame/per-block costs as a fraction, cap at the raw frame
	r := rawBits / bits / over
	return max(r, 1/over)
}

// zip3Bits estimates zip3 bits per element of the sample s (m elements):
// the static bits plus 8 per escape, with the window chosen from the sample
// as a block would.
func zip3Bits(s []byte, f zip3.Format, m int) float64 {
	w := zip3.ChooseWindow(f, s, m)
	esc := w.CountEscapes(f, s, m)
	static := float64(zip3.StaticLen(f, 1<<zip3BlockLog)) * 8 / float64(int(1)<<zip3BlockLog)
	return static + 8*float64(esc)/float64(m)
}

// huffBits estimates huff bits per element of the sample: residue bits plus
// the Huffman code length of the symbol histogram (plus a small margin for
// the table and the sampled table's loss).
func huffBits(s []byte, f zip3.Format, m int) float64 {
	var hist [256]uint32
	switch f {
	case zip3.BF16:
		for i := 0; i < m; i++ {
			hist[byte(binary.LittleEndian.Uint16(s[2*i:])>>7)]++
		}
	case zip3.FP32:
		for i := 0; i < m; i++ {
			hist[byte(binary.LittleEndian.Uint32(s[4*i:])>>23)]++
		}
	case zip3.FP16:
		for i := 0; i < m; i++ {
			hist[s[2*i+1]]++
		}
	default:
		for _, v := range s[:m] {
			hist[v]++
		}
	}
	return float64(8*f.ElemSize()-8) + sampledBits(&hist, m)
}

// sampledBits is the Huffman code length per symbol of a sample's
// histogram (m symbols), plus a small margin for the table and a sampled
// table's loss.
func sampledBits(hist *[256]uint32, m int) float64 {
	return float64(huff.Bits(hist))/float64(m)*1.005 + 0.01
}

// huff2Bits estimates huff2 bits per element of the sample: each byte
// plane (cut as the encoder cuts them) at its Huffman code length, plane
// 0 always, the others where they save huff2MinGain, as the encoder
// decides.
func huff2Bits(s []byte, f zip3.Format, m int) float64 {
	var pl [4][estChunks * estRun]byte
	switch f {
	case zip3.BF16, zip3.FP16:
		splitBF16(pl[1][:m], pl[0][:m], s[:2*m])
	case zip3.FP32:
		var r16 [2 * estChunks * estRun]byte
		var hi []byte
		splitFP32(pl[1][:m], r16[:2*m], pl[0][:m], s[:4*m], &hi)
		splitFP16(pl[3][:m], pl[2][:m], r16[:2*m])
	default:
		copy(pl[0][:m], s)
	}
	var bits float64
	for p := range huff2Planes(f) {
		var hist [256]uint32
		for _, v := range pl[p][:m] {
			hist[v]++
		}
		b := sampledBits(&hist, m)
		if p > 0 && b > 8-8*huff2MinGain/256.0 {
			b = 8 // stored raw
		}
		bits += min(b, 8)
	}
	return bits
}

// ChooseKind is Auto's rule: Raw for uncoded dtypes or when neither coder is
// estimated to save at least 2%; otherwise Zip3 when its estimate is within
// 3% of Huff's (Zip3 is several times faster), else Huff.
func ChooseKind(src []byte, dt dtype.DType) Kind {
	f, ok := zformat(dt)
	if !ok || len(src) < dt.Size() {
		return Raw
	}
	numel := len(src) / dt.Size()
	var buf sampleBuf
	s, m := gather(src, dt.Size(), numel, &buf)
	full := float64(8 * dt.Size())
	z := full / zip3Bits(s, f, m)
	h := full / huffBits(s, f, m)
	switch {
	case max(z, h) < 1.02:
		return Raw
	case z >= 0.97*h:
		return Zip3
	}
	return Huff
}

// Kernels names the SIMD kernels in use, e.g.
// "zip3=avx512 split=avx512 huff=bmi2 crc=vpclmulqdq" (split=avx2+vpclmulqdq:
// the AVX2 merges fold their output's checksum; crc names the one of other
// buffers).
func Kernels() string {
	h := "go"
	if huff.HasAsm() {
		h = "bmi2"
	}
	c := "sse42"
	if crc32c.HasFold() {
		c = "vpclmulqdq"
	}
	return "zip3=" + zip3.KernelName + " split=" + splitLabel() + " huff=" + h + " crc=" + c
}
