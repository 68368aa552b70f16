package quant

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
)

// fp8Golden is written by tests/test_fp8_format.py from a NumPy reference
// of the format's equations (tests/fp8_reference.py).
const fp8Golden = "../../tests/golden/fp8_numpy.bin"

// The Go encoder writes the NumPy reference's main and exact parts byte
// for byte, and decodes them to the reference's values, for B in 32..1024
// and float32, bfloat16 and float16 inputs.
func TestFP8MatchesNumPyReference(t *testing.T) {
	data, err := os.ReadFile(fp8Golden)
	require.NoError(t, err)
	next := func(n int) []byte {
		b := data[:n]
		data = data[n:]
		return b
	}
	u32 := func() int { return int(binary.LittleEndian.Uint32(next(4))) }
	cases := 0
	for len(data) > 0 {
		name := string(next(u32()))
		dt := dtype.DType(next(1)[0])
		block := u32()
		src, main, exact, dec := next(u32()), next(u32()), next(u32()), next(u32())
		gotMain, gotExact := fp8Message(t, src, dt, block)
		require.Equal(t, main, gotMain, "%s: main part", name)
		require.Equal(t, exact, gotExact, "%s: exact part", name)
		got := make([]byte, len(src))
		require.NoError(t, Decode(got, main, exact, dt))
		require.Equal(t, dec, got, "%s: decoded", name)
		cases++
	}
	require.Equal(t, 18, cases)
}
