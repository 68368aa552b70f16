// Package fuzzseed writes Go fuzzing seed-corpus files (testdata/fuzz/...)
// from tests, so the committed corpora can be regenerated.
package fuzzseed

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Write stores one seed (the fuzz target's arguments, in order) as
// testdata/fuzz/<fuzzer>/<name> in the "go test fuzz v1" encoding.
// Supported argument types: []byte, uint8, uint16, uint32, int.
func Write(fuzzer, name string, args ...any) error {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case uint16:
			fmt.Fprintf(&b, "uint16(%d)\n", v)
		case uint32:
			fmt.Fprintf(&b, "uint32(%d)\n", v)
		case int:
			fmt.Fprintf(&b, "int(%d)\n", v)
		default:
			return fmt.Errorf("fuzzseed: unsupported argument type %T", a)
		}
	}
	dir := filepath.Join("testdata", "fuzz", fuzzer)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644)
}
