package reduce

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// The golden file holds torch's results; testdata/gen_golden.py documents
// how the inputs are generated, which the functions below repeat.

const goldenPartners = 8

var (
	goldenLows32 = []uint64{0x0000, 0x0001, 0x5555, 0xFFFF}
	goldenLows64 = []uint64{0x000000000000, 0x000000000001, 0x555555555555, 0xFFFFFFFFFFFF}
)

func goldenPartner(k int, a uint32) uint16 {
	switch k {
	case 0:
		return uint16(a)
	case 1:
		return uint16(a ^ 0x8000)
	case 2:
		return uint16(a + 1)
	case 3:
		return uint16(a ^ 0x8001)
	}
	return uint16(a*uint32(2*k+40503) + uint32(977*k))
}

// goldenPairs returns the operand buffers for a binary op on dt.
func goldenPairs(dt dtype.DType) (a, b []byte) {
	if dt.Size() == 2 {
		for k := range goldenPartners {
			for x := range uint32(1 << 16) {
				a = append(a, byte(x), byte(x>>8))
				y := goldenPartner(k, x)
				b = append(b, byte(y), byte(y>>8))
			}
		}
		return a, b
	}
	for x := range 256 {
		for y := range 256 {
			a, b = append(a, byte(x)), append(b, byte(y))
		}
	}
	return a, b
}

// goldenUnaryInput returns the input buffer for Scale and Average on dt.
func goldenUnaryInput(dt dtype.DType) []byte {
	size := dt.Size()
	var vals []uint64
	switch size {
	case 1, 2:
		for x := range uint64(1) << (8 * size) {
			vals = append(vals, x)
		}
	case 4:
		for hi := range uint64(1 << 16) {
			for _, lo := range goldenLows32 {
				vals = append(vals, hi<<16|lo)
			}
		}
	case 8:
		for hi := range uint64(1 << 16) {
			for _, lo := range goldenLows64 {
				vals = append(vals, hi<<48|lo)
			}
		}
	}
	b := make([]byte, size*len(vals))
	for i, v := range vals {
		store(b, size, i, v)
	}
	return b
}

type goldenFile map[string]json.RawMessage

func (g goldenFile) str(t *testing.T, key string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(g[key], &s); err != nil {
		t.Fatalf("golden.json %s: %v", key, err)
	}
	return s
}

func (g goldenFile) decode(t *testing.T, key string, v any) {
	t.Helper()
	if err := json.Unmarshal(g[key], v); err != nil {
		t.Fatalf("golden.json %s: %v", key, err)
	}
}

func loadReduceGolden(t *testing.T) goldenFile {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// checkGolden compares a result buffer with torch's hash; on a mismatch it
// reports the readable vectors that differ, whose last field is the result
// and whose first is the first input, at the index found by lookup.
func checkGolden(t *testing.T, g goldenFile, key string, dt dtype.DType, got []byte, lookup func(in []uint64) int) {
	t.Helper()
	sum := sha256.Sum256(got)
	want := g.str(t, key+"_sha256")
	if hex.EncodeToString(sum[:]) == want {
		return
	}
	t.Errorf("%s: sha256 %x, torch %s", key, sum, want)
	var vecs []string
	g.decode(t, key+"_vectors", &vecs)
	size := dt.Size()
	for _, v := range vecs {
		var f []uint64
		for _, s := range strings.Fields(v) {
			x, err := strconv.ParseUint(s, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			f = append(f, x)
		}
		i := lookup(f[:len(f)-1])
		if r := load(got, size, i); r != f[len(f)-1] {
			t.Errorf("  %s: inputs %x: got %#x, torch %#x", key, f[:len(f)-1], r, f[len(f)-1])
		}
	}
}

func TestGoldenBinary(t *testing.T) {
	g := loadReduceGolden(t)
	atLevels(t, func(t *testing.T, _ level) {
		for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float8E4M3FN, dtype.Float8E5M2} {
			a, b := goldenPairs(dt)
			size := dt.Size()
			// Find a pair's index by scanning (only used to explain failures).
			lookup := func(in []uint64) int {
				for i := range len(a) / size {
					if load(a, size, i) == in[0] && load(b, size, i) == in[1] {
						return i
					}
				}
				t.Fatalf("golden vector %x not among the inputs", in)
				return 0
			}
			for _, op := range []Op{Sum, Product} {
				got := make([]byte, len(a))
				Reduce3(dt, op, got, a, b)
				checkGolden(t, g, fmt.Sprintf("%s_%s", dt, strings.ToLower(op.String())), dt, got, lookup)
			}
		}
	})
}

func TestGoldenUnary(t *testing.T) {
	g := loadReduceGolden(t)
	var scales []float64
	var divisors []int
	g.decode(t, "scales", &scales)
	g.decode(t, "divisors", &divisors)
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float16, dtype.Float8E4M3FN, dtype.Float8E5M2, dtype.Float32, dtype.Float64} {
		in := goldenUnaryInput(dt)
		size := dt.Size()
		lookup := func(x []uint64) int {
			for i := range len(in) / size {
				if load(in, size, i) == x[0] {
					return i
				}
			}
			t.Fatalf("golden vector %x not among the inputs", x)
			return 0
		}
		for i, f := range scales {
			buf := append([]byte(nil), in...)
			Scale(dt, buf, f)
			checkGolden(t, g, fmt.Sprintf("%s_scale%d", dt, i), dt, buf, lookup)
		}
		for _, n := range divisors {
			buf := append([]byte(nil), in...)
			Average(dt, buf, n)
			checkGolden(t, g, fmt.Sprintf("%s_average%d", dt, n), dt, buf, lookup)
		}
	}
}
