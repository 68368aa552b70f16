//go:build !amd64 || purego

package codec

func splitKernels() []string { return []string{"go"} }

func bestSplit() string { return "go" }

func splitLabel() string { return "go" }

func useSplitKernels(string) {}
