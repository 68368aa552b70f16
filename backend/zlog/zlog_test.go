package zlog

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLevelsAndPrefix(t *testing.T) {
	require.Equal(t, Warn, ParseLevel(""))
	require.Equal(t, Info, ParseLevel("info"))
	require.Equal(t, Trace, ParseLevel("TRACE"))
	require.Equal(t, Off, ParseLevel("off"))

	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := out
	out = w
	defer func() { out = old }()
	SetLevel(Info)
	defer SetLevel(ParseLevel(os.Getenv("ZIPCCL_DEBUG")))

	lg := New(3, "tp")
	lg.Infof("hello %d", 7)
	lg.Tracef("not shown")
	New(-1, "").Warnf("warned")
	w.Close()
	var buf bytes.Buffer
	buf.ReadFrom(r)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], "[3] group tp: zipccl INFO hello 7")
	require.Contains(t, lines[1], "[?] zipccl WARN warned")
}
