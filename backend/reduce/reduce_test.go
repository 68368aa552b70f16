package reduce

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

func TestOpString(t *testing.T) {
	want := map[Op]string{Sum: "SUM", Avg: "AVG", Product: "PRODUCT", Min: "MIN", Max: "MAX",
		BAnd: "BAND", BOr: "BOR", BXor: "BXOR", PreMulSum: "PREMUL_SUM", 9: "Op(9)", 255: "Op(255)"}
	for op, s := range want {
		if got := op.String(); got != s {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, s)
		}
	}
	// The values are a C ABI.
	for i, op := range allOps {
		if uint8(op) != uint8(i) {
			t.Errorf("%s = %d, want %d", op, uint8(op), i)
		}
	}
}

func TestCheck(t *testing.T) {
	// Rows: ops in allOps order (SUM AVG PRODUCT MIN MAX BAND BOR BXOR PREMUL_SUM).
	const (
		float = "+++++---+"
		intgr = "++++++++-"
		boolT = "+-++++++-"
	)
	want := map[dtype.DType]string{
		dtype.Float32: float, dtype.Float64: float, dtype.BFloat16: float, dtype.Float16: float,
		dtype.Float8E4M3FN: float, dtype.Float8E5M2: float,
		dtype.Int8: intgr, dtype.UInt8: intgr, dtype.Int16: intgr, dtype.Int32: intgr, dtype.Int64: intgr,
		dtype.Bool: boolT,
	}
	for _, dt := range append(allDTypes, dtype.Invalid, 13, 200) {
		for i, op := range append(allOps, 9, 200) {
			ok := i < len(allOps) && want[dt] != "" && want[dt][i] == '+'
			err := Check(dt, op)
			if (err == nil) != ok {
				t.Errorf("Check(%s, %s) = %v, want ok=%v", dt, op, err, ok)
				continue
			}
			if err == nil {
				continue
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("Check(%s, %s) = %v, does not wrap ErrUnsupported", dt, op, err)
			}
			var ue *UnsupportedError
			if !errors.As(err, &ue) || ue.Op != op || ue.DType != dt {
				t.Errorf("Check(%s, %s) = %#v, want *UnsupportedError{%s, %s}", dt, op, err, op, dt)
			}
		}
	}
	if got, want := Check(dtype.Float32, BAnd).Error(), "zipccl: reduce op BAND is not supported for float32"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// lengths are element counts around every SIMD step and unroll boundary.
var lengths = []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000}

// TestReduceMatchesReference checks every supported (dtype, op) at every SIMD
// level against the reference, through Reduce, Reduce3 and every aliasing
// form, aligned and misaligned.
func TestReduceMatchesReference(t *testing.T) {
	atLevels(t, func(t *testing.T, _ level) {
		rng := rand.New(rand.NewPCG(1, 1))
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if Check(dt, op) != nil {
					continue
				}
				for _, n := range lengths {
					a, b := fill(rng, dt, n), fill(rng, dt, n)
					checkAllForms(t, fmt.Sprintf("%s/%s/n=%d", dt, op, n), dt, op, a, b)
				}
			}
		}
	})
}

func checkAllForms(t *testing.T, name string, dt dtype.DType, op Op, a, b []byte) {
	t.Helper()
	want := expect(dt, op, a, b)
	wantAA := expect(dt, op, a, a)

	dst := make([]byte, len(a))
	Reduce3(dt, op, dst, a, b)
	checkEqual(t, name+" Reduce3", dt, dst, want, a, b)

	x := bytes.Clone(a)
	Reduce(dt, op, x, b)
	checkEqual(t, name+" Reduce", dt, x, want, a, b)

	x = bytes.Clone(a)
	Reduce3(dt, op, x, x, b)
	checkEqual(t, name+" Reduce3 dst=a", dt, x, want, a, b)

	y := bytes.Clone(b)
	Reduce3(dt, op, y, a, y)
	checkEqual(t, name+" Reduce3 dst=b", dt, y, want, a, b)

	x = bytes.Clone(a)
	Reduce3(dt, op, x, x, x)
	checkEqual(t, name+" Reduce3 dst=a=b", dt, x, wantAA, a, a)

	if size := dt.Size(); size > 1 && len(a) > 0 {
		// Misaligned operands take the staging path; so do misaligned
		// buffers longer than one staging buffer.
		ma, mb, md := offset(a, 1), offset(b, 3), offset(make([]byte, len(a)), 1)
		if aligned(ma, size) || aligned(mb, size) {
			t.Fatal("offset did not misalign")
		}
		Reduce3(dt, op, md, ma, mb)
		checkEqual(t, name+" misaligned", dt, md, want, a, b)
		Reduce(dt, op, ma, mb)
		checkEqual(t, name+" misaligned in place", dt, ma, want, a, b)
	}
}

// TestStagingLong covers staging across several staging buffers and the
// big-endian byte swapping, simulated by pretending the host is big-endian
// and presenting the data in big-endian order.
func TestStagingLong(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, dt := range allDTypes {
		for _, op := range []Op{Sum, Product, Min, Max, BXor} {
			if Check(dt, op) != nil {
				continue
			}
			n := 3*stageBytes/dt.Size() + 5
			a, b := fill(rng, dt, n), fill(rng, dt, n)
			want := expect(dt, op, a, b)
			name := fmt.Sprintf("%s/%s", dt, op)

			md := offset(make([]byte, len(a)), 1)
			Reduce3(dt, op, md, offset(a, 1), offset(b, 1))
			checkEqual(t, name+" misaligned", dt, md, want, a, b)

			func() {
				defer func() { hostBigEndian = false }()
				hostBigEndian = true
				ba, bb := bytes.Clone(a), bytes.Clone(b)
				swapElems(ba, dt.Size())
				swapElems(bb, dt.Size())
				Reduce(dt, op, ba, bb)
				swapElems(ba, dt.Size())
				checkEqual(t, name+" big-endian", dt, ba, want, a, b)
			}()
		}
	}
}

func TestScaleAverageMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	factors := []float64{0.1, -3.5, 1.0 / 3, 1e-30, 1e30, 0, 2}
	divisors := []int{1, 2, 3, 7, 8, 1000}
	for _, dt := range allDTypes {
		for _, n := range []int{0, 1, 9, 33, 1000, 2*stageBytes/dt.Size() + 3} {
			a := fill(rng, dt, n)
			for _, misalign := range []int{0, 1} {
				if misalign == 1 && dt.Size() == 1 {
					continue
				}
				for _, f := range factors {
					if !dt.IsFloat() {
						break
					}
					buf := offset(a, misalign)
					Scale(dt, buf, f)
					checkUnary(t, fmt.Sprintf("Scale %s n=%d by %g misalign=%d", dt, n, f, misalign), dt, buf, a, false, f, 0)
				}
				for _, d := range divisors {
					if dt == dtype.Bool {
						break
					}
					buf := offset(a, misalign)
					Average(dt, buf, d)
					checkUnary(t, fmt.Sprintf("Average %s n=%d by %d misalign=%d", dt, n, d, misalign), dt, buf, a, true, 0, d)
				}
			}
		}
	}
}

func checkUnary(t *testing.T, name string, dt dtype.DType, got, in []byte, div bool, f float64, n int) {
	t.Helper()
	size := dt.Size()
	want := make([]byte, len(in))
	for i := range len(in) / size {
		store(want, size, i, refUnary(dt, load(in, size, i), div, f, n))
	}
	if i := diff(dt, got, want); i >= 0 {
		t.Fatalf("%s: element %d: got %#x, want %#x (in %#x)", name, i, load(got, size, i), load(want, size, i), load(in, size, i))
	}
}

func TestPanics(t *testing.T) {
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	big := f32(16)
	cases := []struct {
		name string
		fn   func()
		msg  string
	}{
		{"unsupported", func() { Reduce(dtype.Float32, BAnd, f32(1), f32(1)) }, "not supported"},
		{"invalid dtype", func() { Reduce(dtype.Invalid, Sum, f32(1), f32(1)) }, "not supported"},
		{"length mismatch", func() { Reduce(dtype.Float32, Sum, f32(2), f32(3)) }, "lengths"},
		{"Reduce3 length mismatch", func() { Reduce3(dtype.Float32, Sum, f32(2), f32(2), f32(3)) }, "lengths"},
		{"partial element", func() { Reduce(dtype.Float32, Sum, make([]byte, 6), make([]byte, 6)) }, "multiple"},
		{"partial overlap", func() { Reduce(dtype.Float32, Sum, big[:32], big[4:36]) }, "overlap"},
		{"same start, other length", func() { Reduce3(dtype.Int8, Sum, big[:8], big[:8], big[:8]) }, ""},
		{"Reduce3 partial overlap b", func() { Reduce3(dtype.Float32, Sum, big[8:40], f32(8), big[:32]) }, "overlap"},
		{"Scale int", func() { Scale(dtype.Int32, f32(1), 2) }, "not supported"},
		{"Scale partial", func() { Scale(dtype.Float32, make([]byte, 5), 2) }, "multiple"},
		{"Average bool", func() { Average(dtype.Bool, make([]byte, 1), 2) }, "not supported"},
		{"Average by 0", func() { Average(dtype.Float32, f32(1), 0) }, "Average by 0"},
		{"Average invalid", func() { Average(dtype.Invalid, f32(1), 2) }, "not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if c.msg == "" { // must not panic
					if r != nil {
						t.Fatalf("unexpected panic %v", r)
					}
					return
				}
				if r == nil {
					t.Fatal("no panic")
				}
				if !strings.Contains(fmt.Sprint(r), c.msg) {
					t.Fatalf("panic %q, want it to mention %q", r, c.msg)
				}
			}()
			c.fn()
		})
	}
}

func TestPartialOverlap(t *testing.T) {
	b := make([]byte, 64)
	cases := []struct {
		x, y []byte
		want bool
	}{
		{b[:16], b[:16], false},
		{b[:16], b[16:32], false},
		{b[:16], b[15:31], true},
		{b[16:32], b[8:24], true},
		{b[:16], b[:8], true},
		{b[:0], b[:16], false},
		{b[:16], make([]byte, 16), false},
	}
	for i, c := range cases {
		if got := partialOverlap(c.x, c.y); got != c.want {
			t.Errorf("case %d: partialOverlap = %v, want %v", i, got, c.want)
		}
	}
}

func TestBoolNormalises(t *testing.T) {
	a := []byte{0, 0, 2, 2, 0x80, 1}
	b := []byte{0, 3, 0, 5, 0x80, 0xFF}
	want := map[Op][]byte{
		Sum: {0, 1, 1, 1, 1, 1}, Max: {0, 1, 1, 1, 1, 1}, BOr: {0, 1, 1, 1, 1, 1},
		Product: {0, 0, 0, 1, 1, 1}, Min: {0, 0, 0, 1, 1, 1}, BAnd: {0, 0, 0, 1, 1, 1},
		BXor: {0, 1, 1, 0, 0, 0},
	}
	for op, w := range want {
		d := make([]byte, len(a))
		Reduce3(dtype.Bool, op, d, a, b)
		if !bytes.Equal(d, w) {
			t.Errorf("bool %s: got %v, want %v", op, d, w)
		}
	}
}

// TestSemanticsSpotChecks pins down the documented corner cases with
// literal values, independent of the reference implementation.
func TestSemanticsSpotChecks(t *testing.T) {
	type c struct {
		dt   dtype.DType
		op   Op
		a, b uint64
		want uint64
	}
	cases := []c{
		{dtype.Float32, Min, 0x80000000, 0x00000000, 0x80000000}, // min(-0, +0) = -0
		{dtype.Float32, Min, 0x00000000, 0x80000000, 0x80000000},
		{dtype.Float32, Max, 0x80000000, 0x00000000, 0x00000000}, // max(-0, +0) = +0
		{dtype.Float32, Max, 0x00000000, 0x80000000, 0x00000000},
		{dtype.Float32, Min, 0x7F800001, 0xFFC00002, 0x7F800001}, // first NaN, bits unchanged
		{dtype.Float32, Max, 0x3F800000, 0xFFC00002, 0xFFC00002},
		{dtype.Float64, Min, 1 << 63, 0, 1 << 63},
		{dtype.BFloat16, Min, 0x8000, 0x0000, 0x8000},
		{dtype.BFloat16, Max, 0x7F81, 0x3F80, 0x7F81},
		{dtype.BFloat16, Sum, 0x7F81, 0x3F80, 0x7FC0},    // NaN rounds to 0x7FC0
		{dtype.BFloat16, Sum, 0x3F80, 0x3B80, 0x3F80},    // 1 + 2^-8: tie to even
		{dtype.BFloat16, Sum, 0x3F81, 0x3B80, 0x3F82},    // odd: rounds up
		{dtype.BFloat16, Sum, 0x7F7F, 0x7F7F, 0x7F80},    // overflow to +Inf
		{dtype.Float16, Sum, 0x7BFF, 0x7BFF, 0x7C00},     // 65504+65504 = +Inf
		{dtype.Float16, Sum, 0x7C00, 0xFC00, 0xFE00},     // Inf-Inf = default NaN (negative, x86)
		{dtype.Float16, Sum, 0x7C01, 0xFE05, 0x7E01},     // first NaN, quieted, payload kept
		{dtype.Float16, Sum, 0x3C00, 0xFE05, 0xFE05},     // the only NaN
		{dtype.Float16, Sum, 0x0001, 0x8001, 0x0000},     // x + -x = +0
		{dtype.Float16, Product, 0x0200, 0x3800, 0x0100}, // subnormal result
		{dtype.Float8E4M3FN, Sum, 0x7E, 0x7E, 0x7E},      // 448+448 saturates
		{dtype.Float8E4M3FN, Sum, 0x7F, 0x01, 0x7F},
		{dtype.Float8E4M3FN, Sum, 0x38, 0xFF, 0xFF}, // second operand's NaN keeps its sign
		{dtype.Float8E5M2, Sum, 0x7B, 0x7B, 0x7C},   // 57344+57344 = +Inf
		{dtype.Float8E5M2, Sum, 0x7C, 0xFC, 0xFF},   // Inf-Inf = negative NaN
		{dtype.Int8, Sum, 0x7F, 0x01, 0x80},         // wraps
		{dtype.Int8, Product, 0x10, 0x10, 0x00},
		{dtype.UInt8, Max, 0xFF, 0x01, 0xFF}, // unsigned compare
		{dtype.Int8, Max, 0xFF, 0x01, 0x01},  // signed compare
		{dtype.Int64, Sum, 1<<63 - 1, 1, 1 << 63},
	}
	for _, x := range cases {
		size := x.dt.Size()
		a, b, d := make([]byte, size), make([]byte, size), make([]byte, size)
		store(a, size, 0, x.a)
		store(b, size, 0, x.b)
		Reduce3(x.dt, x.op, d, a, b)
		if got := load(d, size, 0); got != x.want {
			t.Errorf("%s %s(%#x, %#x) = %#x, want %#x", x.dt, x.op, x.a, x.b, got, x.want)
		}
	}
	avg := []struct {
		dt       dtype.DType
		in, want uint64
		n        int
	}{
		{dtype.Int32, uint64(uint32(0xFFFFFFF9)), uint64(uint32(0xFFFFFFFE)), 3}, // -7/3 = -2
		{dtype.Int8, 7, 2, 3},
		{dtype.UInt8, 0xFF, 0x7F, 2},
		{dtype.Int64, 1 << 63, 0xC000000000000000, 2},
		{dtype.BFloat16, 0x3F80, 0x3EAB, 3}, // 1/3 in float32, rounded to bfloat16
	}
	for _, x := range avg {
		size := x.dt.Size()
		b := make([]byte, size)
		store(b, size, 0, x.in)
		Average(x.dt, b, x.n)
		if got := load(b, size, 0); got != x.want {
			t.Errorf("Average(%s %#x, %d) = %#x, want %#x", x.dt, x.in, x.n, got, x.want)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	for _, dt := range allDTypes {
		a, b := make([]byte, 4096), make([]byte, 4096)
		ma := offset(make([]byte, 4096), 1)
		if n := testing.AllocsPerRun(10, func() {
			Reduce(dt, Max, a, b)
			Reduce(dt, Max, ma[:4088], b[:4088])
		}); n != 0 {
			t.Errorf("%s: %v allocations per Reduce", dt, n)
		}
	}
}

func TestImplementation(t *testing.T) {
	got := Implementation()
	if got != levelNames[bestLevel] {
		t.Errorf("Implementation() = %q, want %q", got, levelNames[bestLevel])
	}
	t.Logf("implementation: %s", got)
}
