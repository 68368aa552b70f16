package gpu

import (
	"fmt"
	"strings"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/topology"
)

// Path is where a CUDA op runs.
type Path int32

// The paths; the values are the C ABI's ZC_DEV_*.
const (
	PathNCCL   Path = 1 // NCCL on the device (and the CUDA kernels when coded)
	PathStaged Path = 2 // copied to pinned host memory, the CPU path, copied back
	// PathCoded: the engine's own transport, the payload coded on the GPU
	// where the switcher codes it (package comm, devpath.go), staged by
	// the engine where not.
	PathCoded Path = 3
)

func (p Path) String() string {
	switch p {
	case PathStaged:
		return "host-staged"
	case PathCoded:
		return "GPU-coded over zipccl's transport"
	}
	return "nccl"
}

// Plan is the decision for one op.
type Plan struct {
	Path   Path
	Reason string // why this path (empty for NCCL chosen by default)
	Refuse string // non-empty: the op cannot run on CUDA tensors at all
}

// Caps is what one rank publishes about its GPU side, once per group, at
// its first CUDA op.
type Caps struct {
	Rank        int           `json:"rank"`
	NCCLVersion int           `json:"nccl_version"` // 0: no NCCL
	NCCLError   string        `json:"nccl_error,omitempty"`
	Kernels     bool          `json:"kernels"`
	KernelsErr  string        `json:"kernels_error,omitempty"`
	Forced      string        `json:"forced,omitempty"` // ZIPCCL_GPU_PATH on this rank: nccl, coded or staged
	RDMA        bool          `json:"rdma"`             // an RDMA NIC NCCL may use between hosts
	Device      int           `json:"device"`
	Peer        topology.Peer `json:"peer"`
}

// agreement is what a set of ranks (the group, or the two ends of a
// point-to-point op) can do together; every member computes the same one
// from the same Caps.
type agreement struct {
	nccl        bool
	ncclVersion int // the oldest among them
	ncclWhy     string
	kernels     bool
	kernelsWhy  string
	nvlink      bool // all on one host, every pair NVLink-connected
	nvlinkWhy   string
	engine      string  // non-empty: a rank forces the engine's transport (coded or staged)
	forceNCCL   string  // non-empty: a rank forces NCCL
	shared      string  // non-empty: two ranks share a GPU, which NCCL refuses
	ethernet    string  // non-empty: the ranks span hosts and a host has no RDMA NIC
	hosts       [][]int // the ranks by host when they span equal hosts of several ranks each, else nil
}

// agree folds caps. topo and host are this host's view, used for the NVLink
// question (ranks on other hosts are never NVLink peers, and ranks on this
// host see the same topology).
func agree(caps []Caps, topo topology.Topology, host string) agreement {
	a := agreement{nccl: true, kernels: true}
	var noNCCL, noKernels, engine, forceNCCL, noRDMA []string
	ids := make([]string, len(caps)) // each rank's host
	for i, c := range caps {
		if c.NCCLVersion == 0 {
			noNCCL = append(noNCCL, fmt.Sprintf("rank %d (%s)", c.Rank, firstNonEmpty(c.NCCLError, "no NCCL")))
		} else if a.ncclVersion == 0 || c.NCCLVersion < a.ncclVersion {
			a.ncclVersion = c.NCCLVersion
		}
		if !c.Kernels {
			noKernels = append(noKernels, fmt.Sprintf("rank %d (%s)", c.Rank, firstNonEmpty(c.KernelsErr, "no kernel library")))
		}
		switch c.Forced {
		case "nccl":
			forceNCCL = append(forceNCCL, fmt.Sprintf("rank %d", c.Rank))
		case "coded", "staged":
			engine = append(engine, fmt.Sprintf("rank %d (ZIPCCL_GPU_PATH=%s)", c.Rank, c.Forced))
		}
		ids[i] = c.Peer.Host
		if !c.RDMA {
			noRDMA = append(noRDMA, fmt.Sprintf("rank %d", c.Rank))
		}
	}
	if len(noNCCL) > 0 {
		a.nccl = false
		a.ncclWhy = "NCCL is missing on " + strings.Join(noNCCL, ", ")
	}
	if len(noKernels) > 0 {
		a.kernels = false
		a.kernelsWhy = "the CUDA kernel library is missing on " + strings.Join(noKernels, ", ")
	}
	if len(engine) > 0 {
		a.engine = "forced by " + strings.Join(engine, ", ")
	}
	if len(forceNCCL) > 0 {
		a.forceNCCL = "ZIPCCL_GPU_PATH=nccl on " + strings.Join(forceNCCL, ", ")
	}
	layout := hosts.Group(ids)
	if len(layout) > 1 && len(noRDMA) > 0 {
		a.ethernet = fmt.Sprintf("the ranks span %d hosts and %s %s no RDMA NIC (NCCL would use plain sockets)",
			len(layout), strings.Join(noRDMA, ", "), map[bool]string{true: "has", false: "have"}[len(noRDMA) == 1])
	}
	if hosts.Equal(layout, len(caps)) {
		a.hosts = layout
	}
	// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"), so
	// processes that share one (tests, or oversubscribed jobs) use the
	// engine's transport.
	owner := map[string]int{}
	for _, c := range caps {
		if c.Peer.UUID == "" {
			continue
		}
		if r, ok := owner[c.Peer.UUID]; ok {
			if a.shared == "" {
				a.shared = fmt.Sprintf("ranks %d and %d share GPU %s (NCCL needs one GPU per rank)", r, c.Rank, c.Peer.UUID)
			}
			continue
		}
		owner[c.Peer.UUID] = c.Rank
	}
	peers := make([]topology.Peer, len(caps))
	for i, c := range caps {
		peers[i] = c.Peer
	}
	a.nvlink, a.nvlinkWhy = topology.AllNVLink(topo, host, peers)
	return a
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// ncclType maps a dtype to the NCCL type reductions use; ok is false where
// NCCL has no such type (int16, the float8 formats before NCCL 2.24, bool
// is handled as uint8 by the caller).
func ncclType(dt dtype.DType) (ncclDataType, bool) {
	switch dt {
	case dtype.Float32:
		return ncclFloat32, true
	case dtype.Float64:
		return ncclFloat64, true
	case dtype.Float16:
		return ncclFloat16, true
	case dtype.BFloat16:
		return ncclBfloat16, true
	case dtype.Int8:
		return ncclInt8, true
	case dtype.UInt8, dtype.Bool:
		return ncclUint8, true
	case dtype.Int32:
		return ncclInt32, true
	case dtype.Int64:
		return ncclInt64, true
	}
	return 0, false
}

// ncclReduction maps a reduction (dtype, op) to NCCL. premul means the op
// must be created with ncclRedOpCreatePreMulSum. why says what NCCL lacks
// (the op then takes the staged path). Bool follows the engine (and
// ProcessGroupNCCL): SUM and MAX are OR (max of 0/1 bytes), PRODUCT and MIN
// are AND (min).
func ncclReduction(dt dtype.DType, op reduce.Op, version int) (t ncclDataType, o ncclRedOp, premul bool, why string) {
	if err := reduce.Check(dt, op); err != nil {
		return 0, 0, false, err.Error()
	}
	t, ok := ncclType(dt)
	if !ok {
		return 0, 0, false, fmt.Sprintf("NCCL cannot reduce %s", dt)
	}
	if dt == dtype.BFloat16 && version < 21000 {
		return 0, 0, false, "NCCL before 2.10 cannot reduce bfloat16"
	}
	if dt == dtype.Bool {
		switch op {
		case reduce.Sum, reduce.Max, reduce.BOr:
			return t, ncclMax, false, ""
		case reduce.Product, reduce.Min, reduce.BAnd:
			return t, ncclMin, false, ""
		}
		return 0, 0, false, fmt.Sprintf("NCCL has no %s", op)
	}
	switch op {
	case reduce.Sum:
		return t, ncclSum, false, ""
	case reduce.Product:
		return t, ncclProd, false, ""
	case reduce.Min:
		return t, ncclMin, false, ""
	case reduce.Max:
		return t, ncclMax, false, ""
	case reduce.Avg:
		if version < 21000 {
			return 0, 0, false, "NCCL before 2.10 has no AVG"
		}
		return t, ncclAvg, false, ""
	case reduce.PreMulSum:
		if version < 21100 {
			return 0, 0, false, "NCCL before 2.11 has no PREMUL_SUM"
		}
		return t, 0, true, ""
	}
	return 0, 0, false, fmt.Sprintf("NCCL has no %s", op)
}

// codedOnGPU reports whether the GPU's coded path handles op at all (the
// switcher and the buffer layout decide the rest): zip3-coded dtypes, the
// collectives of the coded path, and SUM or PRODUCT for reductions.
func codedOnGPU(kind opkind.Kind, dt dtype.DType, op reduce.Op) bool {
	switch kind {
	case opkind.AllReduce, opkind.ReduceScatter:
		if op != reduce.Sum && op != reduce.Product {
			return false
		}
	case opkind.AllGather, opkind.AllToAll, opkind.Broadcast:
	default:
		return false
	}
	return switcher.Compressible(dt)
}

// decide chooses the path of op from what the ranks involved can do
// together (a) and what this rank can (mine). Whether the op runs through
// NCCL or through the engine's transport depends only on agreed inputs, so
// every rank decides the same; on the engine's transport each rank codes
// on its GPU when it has the kernels and was not told to stage, and stages
// otherwise: both send the same messages.
func decide(op *Op, a agreement, mine Caps, mode switcher.Mode) Plan {
	if op.Kind == opkind.Recv && op.Root < 0 {
		// The sender cannot know, so it could not choose its half to match.
		return Plan{Refuse: "receiving CUDA tensors from any source is not supported (NCCL has no any-source receive); name the source rank"}
	}
	if op.Lossy.Mode != quant.None {
		return decideLossy(op, a)
	}
	engine := func(why string) Plan {
		switch {
		case mine.Forced == "staged":
			return Plan{Path: PathStaged, Reason: why + "; this rank stages (ZIPCCL_GPU_PATH=staged)"}
		case !mine.Kernels:
			return Plan{Path: PathStaged, Reason: why + "; this rank has no CUDA kernels (" + firstNonEmpty(mine.KernelsErr, "not loaded") + ")"}
		}
		return Plan{Path: PathCoded, Reason: why}
	}
	ncclWhyNot := firstNonEmpty(a.shared, a.ncclWhy)
	if ncclWhyNot == "" && op.Kind.IsReduction() {
		if _, _, _, why := ncclReduction(op.DType, op.ReduceOp, a.ncclVersion); why != "" {
			ncclWhyNot = why
		}
	}
	switch {
	case a.forceNCCL != "" && a.engine != "":
		return Plan{Refuse: fmt.Sprintf("the ranks disagree on the GPU path: %s, but %s", a.forceNCCL, a.engine)}
	case a.forceNCCL != "" && ncclWhyNot != "":
		return Plan{Refuse: fmt.Sprintf("%s, but NCCL cannot run it: %s", a.forceNCCL, ncclWhyNot)}
	case a.forceNCCL != "":
		return Plan{Path: PathNCCL, Reason: a.forceNCCL}
	case a.engine != "":
		return engine(a.engine)
	case ncclWhyNot != "":
		return engine(ncclWhyNot)
	case a.ethernet != "" && !a.nvlink && a.kernels && mode != switcher.Never:
		// What NCCL's sockets would carry raw, zipccl codes.
		return engine(a.ethernet)
	case mode == switcher.Always && !a.kernels && !a.nvlink && codedOnGPU(op.Kind, op.DType, op.ReduceOp):
		// The user asked for compression and the GPU cannot code: the
		// host codes it.
		return Plan{Path: PathStaged, Reason: "compression is on (mode always) but " + a.kernelsWhy}
	}
	return Plan{Path: PathNCCL}
}

// decideLossy plans an op the group's lossy policy codes: quantized on the
// GPU and moved by NCCL where every rank can, host-staged otherwise (the
// host codes the same bytes). Nothing here falls back to exact.
func decideLossy(op *Op, a agreement) Plan {
	why := fmt.Sprintf("the group's lossy policy codes it (%v)", op.Lossy)
	whyNot := firstNonEmpty(a.engine, a.shared, a.ncclWhy, orText(a.kernels, "", a.kernelsWhy), lossyOnGPU(op))
	switch {
	case whyNot == "":
		return Plan{Path: PathNCCL, Reason: why + ", quantized on the GPU and moved by NCCL"}
	case a.forceNCCL != "":
		return Plan{Refuse: fmt.Sprintf("%s, but %s, and lossy coding cannot run on the GPU: %s", why, a.forceNCCL, whyNot)}
	}
	return Plan{Path: PathStaged, Reason: why + ", coded on the host: " + whyNot}
}
