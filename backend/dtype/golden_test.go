package dtype

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// golden holds PyTorch's results, written by testdata/gen_golden.py (which
// documents the layouts of the hashes).
type golden struct {
	TorchVersion string            `json:"torch_version"`
	BF16ToF32    string            `json:"bf16_to_f32_sha256"`
	F16ToF32     string            `json:"f16_to_f32_sha256"`
	E4M3FNToF32  []string          `json:"e4m3fn_to_f32"`
	E5M2ToF32    []string          `json:"e5m2_to_f32"`
	Vectors      []string          `json:"vectors"`
	Samples      map[string]string `json:"-"` // sample_f32_to_<name>_sha256
	Exhaustive   map[string]string `json:"-"` // exhaustive_f32_to_<name>_sha256
}

// sampleLows must match SAMPLE_LOWS in gen_golden.py.
var sampleLows = []uint32{0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x2000, 0x3000,
	0x7FFF, 0x8000, 0x8001, 0xF000, 0xFFFF}

// narrowings are the float32 → reduced-precision conversions by the names
// gen_golden.py uses, with their results widened to uint16.
var narrowings = []struct {
	name  string
	size  int
	apply func(float32) uint16
}{
	{"bf16", 2, F32ToBF16},
	{"f16", 2, F32ToF16},
	{"e4m3fn", 1, func(f float32) uint16 { return uint16(F32ToE4M3FN(f)) }},
	{"e5m2", 1, func(f float32) uint16 { return uint16(F32ToE5M2(f)) }},
}

func loadGolden(t *testing.T) *golden {
	t.Helper()
	data, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	g.Samples, g.Exhaustive = map[string]string{}, map[string]string{}
	for k, v := range all {
		var s string
		switch {
		case strings.HasPrefix(k, "sample_f32_to_"):
			if err := json.Unmarshal(v, &s); err != nil {
				t.Fatal(err)
			}
			g.Samples[strings.TrimSuffix(strings.TrimPrefix(k, "sample_f32_to_"), "_sha256")] = s
		case strings.HasPrefix(k, "exhaustive_f32_to_"):
			if err := json.Unmarshal(v, &s); err != nil {
				t.Fatal(err)
			}
			g.Exhaustive[strings.TrimSuffix(strings.TrimPrefix(k, "exhaustive_f32_to_"), "_sha256")] = s
		}
	}
	return &g
}

func TestGoldenWiden16(t *testing.T) {
	g := loadGolden(t)
	for _, c := range []struct {
		name string
		fn   func(uint16) float32
		want string
	}{
		{"BF16ToF32", BF16ToF32, g.BF16ToF32},
		{"F16ToF32", F16ToF32, g.F16ToF32},
	} {
		buf := make([]byte, 4<<16)
		for i := range 1 << 16 {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(c.fn(uint16(i))))
		}
		if got := hexSHA(buf); got != c.want {
			t.Errorf("%s over all 65536 inputs: sha256 %s, torch %s %s (see the vectors test for details)", c.name, got, g.TorchVersion, c.want)
		}
	}
}

func TestGoldenWiden8(t *testing.T) {
	g := loadGolden(t)
	for _, c := range []struct {
		name  string
		fn    func(uint8) float32
		table []string
	}{
		{"E4M3FNToF32", E4M3FNToF32, g.E4M3FNToF32},
		{"E5M2ToF32", E5M2ToF32, g.E5M2ToF32},
	} {
		want := strings.Fields(strings.Join(c.table, " "))
		if len(want) != 256 {
			t.Fatalf("%s: golden table has %d entries", c.name, len(want))
		}
		for i, w := range want {
			if got := fmt.Sprintf("%08x", math.Float32bits(c.fn(uint8(i)))); got != w {
				t.Errorf("%s(%#02x) = %s, torch %s", c.name, i, got, w)
			}
		}
	}
}

func TestGoldenNarrowSamples(t *testing.T) {
	g := loadGolden(t)
	for _, n := range narrowings {
		want, ok := g.Samples[n.name]
		if !ok {
			t.Fatalf("golden.json lacks sample_f32_to_%s_sha256", n.name)
		}
		buf := make([]byte, 0, n.size*len(sampleLows)<<16)
		for hi := range uint32(1 << 16) {
			for _, lo := range sampleLows {
				buf = appendLE(buf, n.apply(math.Float32frombits(hi<<16|lo)), n.size)
			}
		}
		if got := hexSHA(buf); got != want {
			t.Errorf("F32To%s over the sample set: sha256 %s, torch %s", n.name, got, want)
		}
	}
}

func TestGoldenVectors(t *testing.T) {
	g := loadGolden(t)
	if len(g.Vectors) == 0 {
		t.Fatal("no vectors in golden.json")
	}
	fns := map[string]func(uint32) uint32{
		"bf16_to_f32": func(x uint32) uint32 { return math.Float32bits(BF16ToF32(uint16(x))) },
		"f16_to_f32":  func(x uint32) uint32 { return math.Float32bits(F16ToF32(uint16(x))) },
	}
	for _, n := range narrowings {
		fns["f32_to_"+n.name] = func(x uint32) uint32 { return uint32(n.apply(math.Float32frombits(x))) }
	}
	for _, v := range g.Vectors {
		f := strings.Fields(v)
		if len(f) != 3 || fns[f[0]] == nil {
			t.Fatalf("bad vector %q", v)
		}
		in, err1 := strconv.ParseUint(f[1], 16, 32)
		want, err2 := strconv.ParseUint(f[2], 16, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad vector %q", v)
		}
		if got := fns[f[0]](uint32(in)); got != uint32(want) {
			t.Errorf("%s(%s) = %0*x, torch %s", f[0], f[1], len(f[2]), got, f[2])
		}
	}
}

// TestGoldenExhaustive compares every float32 → reduced-precision conversion
// over all 2³² inputs with torch. It takes tens of seconds, so it only runs
// when ZIPCCL_EXHAUSTIVE=1.
func TestGoldenExhaustive(t *testing.T) {
	if os.Getenv("ZIPCCL_EXHAUSTIVE") != "1" {
		t.Skip("set ZIPCCL_EXHAUSTIVE=1 to compare all 2^32 float32 inputs with torch")
	}
	g := loadGolden(t)
	const chunks, chunk = 256, 1 << 24
	for _, n := range narrowings {
		want, ok := g.Exhaustive[n.name]
		if !ok {
			t.Errorf("golden.json lacks exhaustive_f32_to_%s_sha256; run gen_golden.py --exhaustive", n.name)
			continue
		}
		digests := make([][sha256.Size]byte, chunks)
		var wg sync.WaitGroup
		next := make(chan int, chunks)
		for k := range chunks {
			next <- k
		}
		close(next)
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				buf := make([]byte, 0, chunk*n.size)
				for k := range next {
					buf = buf[:0]
					for i := range uint32(chunk) {
						buf = appendLE(buf, n.apply(math.Float32frombits(uint32(k)<<24|i)), n.size)
					}
					digests[k] = sha256.Sum256(buf)
				}
			})
		}
		wg.Wait()
		h := sha256.New()
		for _, d := range digests {
			h.Write(d[:])
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("F32To%s over all 2^32 inputs: sha256 %s, torch %s", n.name, got, want)
		}
	}
}

func appendLE(b []byte, v uint16, size int) []byte {
	if size == 1 {
		return append(b, byte(v))
	}
	return binary.LittleEndian.AppendUint16(b, v)
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
