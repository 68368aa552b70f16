//go:build gpu

package gotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
)

var quantModes = []quant.Mode{quant.Int8, quant.Int4, quant.FP8}

// quantBlocks are the block sizes tested for mode: the smallest, the
// collectives', the largest.
func quantBlocks(mode quant.Mode) []int {
	if mode == quant.FP8 {
		return []int{32, 256, 1024}
	}
	return []int{32, 2048, 65536}
}

// quantInput is n random elements of dt with what the format singles out:
// an all-zero block, a NaN block, and an infinity in the last block (a
// short one when block does not divide n), when there are blocks enough.
func quantInput(dt dtype.DType, n, block int, seed uint64) []byte {
	src := gaussian(dt, n, 0.02*float64(1+seed%5), seed)
	if n > 3*block {
		for i := block; i < 2*block; i++ {
			dtype.PutFloat32(dt, src, i, 0)
		}
		dtype.PutFloat32(dt, src, 2*block+7, float32(math.NaN()))
	}
	if n > 0 && seed%2 == 0 {
		dtype.PutFloat32(dt, src, n-1, float32(math.Inf(-1)))
	}
	return src
}

func quantSizes(l *Lib, block int) []int {
	s := []int{0, 1, 31, 2048, 2049, 5*2048 + 3, 70001}
	if !emulated(l) && (block == 2048 || block == 256) {
		s = append(s, 1<<20+7, 9<<20)
	}
	return s
}

// The C API's encode, decode and accumulate give package quant's bytes on
// random inputs: every dtype, mode, block size (the smallest, the
// collectives', the largest) and tails.
func TestQuantMatchesGo(t *testing.T) {
	l := open(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16} {
		for _, mode := range quantModes {
			for _, block := range quantBlocks(mode) {
				for i, n := range quantSizes(l, block) {
					what := fmt.Sprintf("%v %v block %d n %d", dt, mode, block, n)
					src := quantInput(dt, n, block, uint64(i))
					gm := make([]byte, quant.MainLen(mode, n, block))
					ge, err := quant.Encode(gm, nil, src, dt, mode, block)
					if err != nil {
						t.Fatal(err)
					}
					m, e, err := l.QuantEncode(int(dt), int(mode), block, src, int64(n))
					if err != nil {
						t.Fatalf("%s: encode: %v", what, err)
					}
					if !bytes.Equal(m, gm) || !bytes.Equal(e, ge) {
						t.Fatalf("%s: main (%d bytes) or exact part (%d bytes) differs from quant's (%d, %d)", what,
							len(m), len(e), len(gm), len(ge))
					}
					targets := []dtype.DType{dt}
					if dt == dtype.Float32 {
						targets = append(targets, dtype.BFloat16, dtype.Float16)
					}
					for _, to := range targets {
						got, err := l.QuantDecode(gm, ge, int(to), to.Size(), int64(n))
						if err != nil {
							t.Fatalf("%s: decode into %v: %v", what, to, err)
						}
						want := make([]byte, n*to.Size())
						if err := quant.Decode(want, gm, ge, to); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("%s: decode into %v differs from quant.Decode", what, to)
						}
					}
					acc := make([]float32, n)
					for j := range acc {
						acc[j] = float32(rng.NormFloat64())
					}
					if n > 10 {
						acc[3] = float32(math.NaN())
						acc[4] = float32(math.Inf(1))
					}
					for _, first := range []bool{false, true} {
						got, err := l.QuantAccumulate(gm, ge, f32Bytes(acc), first)
						if err != nil {
							t.Fatalf("%s: accumulate: %v", what, err)
						}
						want := append([]float32{}, acc...)
						if err := quant.Accumulate(want, gm, ge, first); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, f32Bytes(want)) {
							t.Fatalf("%s: accumulate (first %v) differs from quant.Accumulate", what, first)
						}
					}
				}
			}
		}
	}
}

// The lossy reductions' own steps give backend/lossy's results bit for
// bit: a rank's own contribution added exact (reduce's widening and
// accumulation, float32's +=), and the sum divided (AVG) and rounded once.
func TestQuantAddExactAndFinishMatchGo(t *testing.T) {
	l := open(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []dtype.DType{dtype.Float32, dtype.BFloat16, dtype.Float16} {
		for _, n := range []int{0, 1, 255, 256, 70001} {
			what := fmt.Sprintf("%v n %d", dt, n)
			src := gaussian(dt, n, 3, uint64(n)+1)
			acc := make([]float32, n)
			for j := range acc {
				acc[j] = float32(rng.NormFloat64() * 1e3)
			}
			if n > 10 { // specials, never two NaNs at one index (x86 keeps the operand's payload)
				dtype.PutFloat32(dt, src, 9, float32(math.NaN()))
				dtype.PutFloat32(dt, src, 5, float32(math.Inf(1)))
				acc[3], acc[4], acc[5] = float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
				acc[6] = 3e38 // float16 and bfloat16 overflow
			}
			for _, first := range []bool{false, true} {
				got, err := l.QuantAddExact(int(dt), src, f32Bytes(acc), first)
				if err != nil {
					t.Fatalf("%s: add exact: %v", what, err)
				}
				want := append([]float32{}, acc...)
				switch {
				case dt == dtype.Float32:
					for i := range want {
						v := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
						if first {
							want[i] = v
						} else {
							want[i] += v
						}
					}
				case first:
					reduce.Widen(dt, want, src)
				default:
					reduce.Accum(dt, reduce.Sum, want, src)
				}
				if !bytes.Equal(got, f32Bytes(want)) {
					t.Fatalf("%s: add exact (first %v) differs from Go", what, first)
				}
			}
			for _, div := range []int{1, 3, 8} {
				got, err := l.QuantFinish(f32Bytes(acc), div, int(dt), dt.Size())
				if err != nil {
					t.Fatalf("%s: finish: %v", what, err)
				}
				want := append([]float32{}, acc...)
				if div > 1 {
					for i := range want {
						want[i] /= float32(div)
					}
				}
				wb := f32Bytes(want)
				if dt != dtype.Float32 {
					wb = make([]byte, n*dt.Size())
					reduce.Narrow(dt, wb, want)
				}
				if !bytes.Equal(got, wb) {
					t.Fatalf("%s: finish (divisor %d) differs from Go", what, div)
				}
			}
		}
	}
}

// Messages quant rejects are rejected, with the status the C API gives
// for each problem.
func TestQuantCorruptRejected(t *testing.T) {
	l := open(t)
	const n = 5001 // odd: int4 has a padding nibble
	for _, mode := range quantModes {
		block, sl, badCode := 2048, 4, byte(0x80)
		if mode == quant.FP8 {
			block, sl, badCode = 256, 8, 0x7F // 5001: a short last block, whose padding codes count
		}
		src := quantInput(dtype.BFloat16, n, block, 2)
		gm := make([]byte, quant.MainLen(mode, n, block))
		ge, err := quant.Encode(gm, nil, src, dtype.BFloat16, mode, block)
		if err != nil {
			t.Fatal(err)
		}
		codes := quant.HeaderLen + sl*quant.Blocks(n, block)
		type bad struct {
			what        string
			main, exact []byte
			status      int
		}
		mut := func(f func(m []byte)) []byte {
			m := append([]byte{}, gm...)
			f(m)
			return m
		}
		bads := []bad{
			{"magic", mut(func(m []byte) { m[0] = 'X' }), nil, 4},
			{"reserved byte", mut(func(m []byte) { m[21] = 1 }), nil, 4},
			{"scale -0", mut(func(m []byte) { binary.LittleEndian.PutUint32(m[quant.HeaderLen:], 0x80000000) }), nil, 4},
			{"scale +Inf", mut(func(m []byte) { binary.LittleEndian.PutUint32(m[quant.HeaderLen:], 0x7F800000) }), nil, 4},
			{"code -128 / -8 / E4M3 NaN", mut(func(m []byte) { m[codes+10] = badCode }), nil, 4},
			{"exact part long", gm, append(append([]byte{}, ge...), 0), 4},
			{"exact part short", gm, ge[:len(ge)-1], 4},
			{"exact count", mut(func(m []byte) { m[16]++ }), nil, 4},
			{"main part short", gm[:len(gm)-1], nil, 4},
		}
		if mode == quant.Int4 {
			bads = append(bads, bad{"padding nibble", mut(func(m []byte) { m[len(m)-1] |= 1 }), nil, 4})
		}
		if mode == quant.FP8 {
			bads = append(bads,
				bad{"alpha -0", mut(func(m []byte) { binary.LittleEndian.PutUint32(m[quant.HeaderLen+4:], 0x80000000) }), nil, 4},
				bad{"alpha NaN", mut(func(m []byte) { binary.LittleEndian.PutUint32(m[quant.HeaderLen+4:], 0x7FC00000) }), nil, 4},
				bad{"code 0xff", mut(func(m []byte) { m[codes+5] = 0xFF }), nil, 4},
				bad{"scale above MaxFloat32/448", mut(func(m []byte) { binary.LittleEndian.PutUint32(m[quant.HeaderLen:], 0x7B124925) }), nil, 4})
		}
		for _, b := range bads {
			if b.exact == nil {
				b.exact = ge
			}
			out := make([]byte, 2*n)
			if err := quant.Decode(out, b.main, b.exact, dtype.BFloat16); !errors.Is(err, quant.ErrCorrupt) {
				t.Fatalf("%v %s: quant says %v", mode, b.what, err)
			}
			_, err := l.QuantDecode(b.main, b.exact, int(dtype.BFloat16), 2, n)
			var se *StatusError
			if !errors.As(err, &se) || se.Status != b.status {
				t.Fatalf("%v %s: decode gave %v, want status %d", mode, b.what, err, b.status)
			}
			_, err = l.QuantAccumulate(b.main, b.exact, make([]byte, 4*n), false)
			if !errors.As(err, &se) || se.Status != b.status {
				t.Fatalf("%v %s: accumulate gave %v, want status %d", mode, b.what, err, b.status)
			}
		}
		// requests the message does not fit: quant says corrupt, the C API which
		var se *StatusError
		if _, err := l.QuantDecode(gm, ge, int(dtype.BFloat16), 2, n-1); !errors.As(err, &se) || se.Status != 8 {
			t.Fatalf("%v: another element count gave %v, want status 8 (size)", mode, err)
		}
		if _, err := l.QuantDecode(gm, ge, int(dtype.Float32), 4, n); !errors.As(err, &se) || se.Status != 9 {
			t.Fatalf("%v: bfloat16 into float32 gave %v, want status 9 (dtype)", mode, err)
		}
	}
}
