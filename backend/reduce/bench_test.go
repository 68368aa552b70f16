package reduce

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/zipccl/zipccl/backend/dtype"
)

// Reduce(dt, op, dst, src) in place, as a ring step uses it. Throughput is
// reported per byte of dst (b.SetBytes(len(dst))). Memmove is copy(dst, src)
// over the same sizes: the reduction reads both buffers and writes dst,
// memmove reads one and writes one, so a reduction near memmove speed is
// not the bottleneck of a ring step that also has to move the data.
//
//	go test -run '^$' -bench . -benchtime 1s ./backend/reduce/

var benchSizes = []int{1 << 20, 16 << 20}

func sizeName(n int) string { return fmt.Sprintf("%dMiB", n>>20) }

func BenchmarkMemmove(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			dst, src := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

func BenchmarkReduce(b *testing.B) {
	defer func() { curLevel = bestLevel }()
	cases := []struct {
		dt dtype.DType
		op Op
	}{
		{dtype.Float32, Sum}, {dtype.BFloat16, Sum}, {dtype.Float16, Sum},
		{dtype.Float64, Sum}, {dtype.Int32, Sum}, {dtype.Float32, Max},
	}
	for _, c := range cases {
		for _, n := range benchSizes {
			rng := rand.New(rand.NewPCG(9, 9))
			dst, src := benchData(rng, c.dt, n), benchData(rng, c.dt, n)
			for l := levelGeneric; l <= maxLevel; l++ {
				name := fmt.Sprintf("%s/%s/%s/%s", c.dt, c.op, sizeName(n), levelNames[l])
				b.Run(name, func(b *testing.B) {
					curLevel = l
					b.SetBytes(int64(n))
					for b.Loop() {
						Reduce(c.dt, c.op, dst, src)
					}
				})
			}
		}
	}
}

// benchData returns random values; floats lie in (-1, 1), so repeated
// in-place sums stall by absorption long before they overflow, and no
// iteration meets the (slower) Inf/NaN paths.
func benchData(rng *rand.Rand, dt dtype.DType, n int) []byte {
	size := dt.Size()
	b := make([]byte, n)
	for i := range n / size {
		v := rng.Uint64()
		if dt.IsFloat() {
			f := rng.Float64()*2 - 1
			switch dt {
			case dtype.Float64:
				v = math.Float64bits(f)
			default:
				v = narrow32(dt, float32(f))
			}
		}
		store(b, size, i, v)
	}
	return b
}
