package codecbench

import (
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
)

func gaussBF16(n int, sigma float64) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], dtype.F32ToBF16(float32(r.NormFloat64()*sigma)))
	}
	return b
}

func TestRun(t *testing.T) {
	n := 1 << 16
	o := Options{Rounds: 1, MinTime: time.Millisecond}
	rows := Run(gaussBF16(n, 0.02), dtype.BFloat16, o)
	names := map[string]bool{}
	for _, r := range rows {
		if r.Error != "" {
			t.Errorf("%v", r)
		}
		names[r.Name+"/"+r.Op] = true
		t.Log(r)
	}
	for _, want := range []string{"memcpy/copy", "raw/encode", "raw/decode", "zip3/encode", "zip3/decode", "huff/encode", "huff/decode",
		"auto/encode", "auto/decode", "huff0-4x/encode", "huff0-4x/decode", "zstd-fastest/encode", "zstd-fastest/decode", "entropy/bound", "fp8/encode", "fp8/decode"} {
		if !names[want] {
			t.Errorf("missing row %s", want)
		}
	}
	for _, r := range rows {
		if r.Name == "fp8" && (r.Ratio < 1.9 || r.Ratio > 1.95 || !strings.Contains(r.Note, "relative L2 error 0.02")) {
			t.Errorf("fp8 row: bf16 at 1 + 8/256 bytes an element, error about 0.026: %+v", r)
		}
	}
	if _, err := json.Marshal(rows); err != nil {
		t.Fatal(err)
	}
}

// TestReport prints a full report when ZIPCCL_CODECBENCH_MIB is set, e.g.
// ZIPCCL_CODECBENCH_MIB=4 go test -run Report -v ./backend/codec/codecbench
func TestReport(t *testing.T) {
	mib, _ := strconv.Atoi(os.Getenv("ZIPCCL_CODECBENCH_MIB"))
	if mib <= 0 {
		t.Skip("set ZIPCCL_CODECBENCH_MIB")
	}
	for _, dt := range []dtype.DType{dtype.BFloat16, dtype.Float32, dtype.Float16} {
		b := codec.StandIn(dt, mib<<20)
		for _, row := range Run(b, dt, Options{Rounds: 7, MinTime: 100 * time.Millisecond}) {
			t.Log(row)
		}
	}
}

// TestTimersInterleave checks that the rounds of different measurements
// alternate, and that each keeps its best round.
func TestTimersInterleave(t *testing.T) {
	var log []byte
	var tm timers
	slow := 0
	a := tm.add(func() {
		log = append(log, 'a')
		if slow > 0 {
			time.Sleep(30 * time.Millisecond) // far above any descheduling of the fast round under load
		}
	})
	tm.add(func() { log = append(log, 'b'); slow++ })
	tm.run(&Options{Rounds: 3, MinTime: time.Microsecond})
	var runs []byte
	for i, c := range log {
		if i == 0 || c != log[i-1] {
			runs = append(runs, c)
		}
	}
	if string(runs) != "ababab" {
		t.Fatalf("call order %q: rounds not interleaved", log)
	}
	// a's first round ran before b made it slow
	if a.wall >= 15*time.Millisecond {
		t.Fatalf("a's best round took %v: not the fast one", a.wall)
	}
}
