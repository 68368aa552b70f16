// Package opkind names the operations of the C ABI (its ZC_OP_* codes), for
// the communicator and the GPU path alike.
package opkind

import "fmt"

// Kind is an operation kind; the values are the C ABI's ZC_OP_* codes.
type Kind uint8

// The operation kinds.
const (
	AllReduce     Kind = 1
	Broadcast     Kind = 2
	Reduce        Kind = 3
	AllGather     Kind = 4
	ReduceScatter Kind = 5
	AllToAll      Kind = 6
	Gather        Kind = 7
	Scatter       Kind = 8
	Send          Kind = 9
	Recv          Kind = 10
	Barrier       Kind = 11
)

var names = map[Kind]string{
	AllReduce: "all_reduce", Broadcast: "broadcast", Reduce: "reduce",
	AllGather: "all_gather", ReduceScatter: "reduce_scatter", AllToAll: "all_to_all",
	Gather: "gather", Scatter: "scatter", Send: "send", Recv: "recv", Barrier: "barrier",
}

func (k Kind) String() string {
	if s, ok := names[k]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// IsReduction reports whether the op combines the ranks' values.
func (k Kind) IsReduction() bool { return k == AllReduce || k == Reduce || k == ReduceScatter }

// IsP2P reports whether the op is one half of a point-to-point transfer.
func (k Kind) IsP2P() bool { return k == Send || k == Recv }
