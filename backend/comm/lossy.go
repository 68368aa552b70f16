package comm

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// lossyEnvWarning is logged once per process when ZIPCCL_LOSSY gives
// groups a lossy policy nobody wrote in code.
var lossyEnvWarning sync.Once

// lossyOption reads the group's lossy policy: the group option lossy, else
// ZIPCCL_LOSSY, else lossless.
func (c *Comm) lossyOption(opts map[string]string) error {
	spec, ok := opts["lossy"]
	fromEnv := !ok
	if fromEnv {
		spec = os.Getenv("ZIPCCL_LOSSY")
	}
	p, err := lossy.Parse(spec)
	if err != nil {
		return err
	}
	if fromEnv && !p.Lossless() {
		lossyEnvWarning.Do(func() {
			c.log.Warnf("ZIPCCL_LOSSY=%q: collectives of zipccl groups are lossy (%v)", spec, p)
		})
	}
	c.setPolicy(p)
	return nil
}

func (c *Comm) setPolicy(p lossy.Policy) {
	c.policy.Store(&p)
	if !p.Lossless() {
		c.log.Infof("lossy policy: %v", p)
	}
}

// SetLossy replaces the group's lossy policy (lossy.Parse's spec; "" is
// lossless). It applies to the ops submitted after it; every rank must set
// the same policy, or their next op it concerns fails with a mismatch.
func (c *Comm) SetLossy(spec string) error {
	p, err := lossy.Parse(spec)
	if err != nil {
		return invalidf("%s", err.Error())
	}
	c.setPolicy(p)
	return nil
}

// Policy is the group's lossy policy now.
func (c *Comm) Policy() lossy.Policy { return *c.policy.Load() }

// lossyCoding is the group's policy as it is now and the coding op runs
// with under it (quant.None's: exact).
func (c *Comm) lossyCoding(op *Op) (lossy.Policy, lossy.Coding) {
	p := c.Policy()
	var total int64
	switch op.Kind {
	case opkind.AllGather:
		total = byteLen(op.Out) // the gathered tensor
	case opkind.ReduceScatter, opkind.AllReduce:
		total = byteLen(op.In) // the tensor reduced
	default:
		return p, lossy.Coding{} // op kinds a policy cannot make lossy
	}
	return p, p.Applies(op.Kind, op.DType, op.ReduceOp, int(total))
}

// applyPolicy gives op the group's policy as it is now, and the mode the op
// runs with under it. A CUDA tensor the policy covers is planned lossy on
// the GPU (NCCL) or host-staged (DevicePlan), never GPU-coded on the
// engine's transport, whose coders are lossless: one that reaches that path
// all the same (its policy set between its plan and its submission) fails
// here, on every rank, rather than run exact behind the user's back. The
// GPU side re-plans NCCL ops with their coding and refuses them likewise.
func (c *Comm) applyPolicy(op *Op) error {
	op.policy, op.lossy = c.lossyCoding(op)
	if op.lossy.Mode != quant.None && op.Dev != nil && op.Dev.Engine {
		return invalidf("%s: the group's lossy policy (%v) covers this %v tensor, and it was planned for the GPU-coded path, which codes losslessly only: this op was planned before the policy was set", op.Kind, op.policy, op.DType)
	}
	return nil
}

// runLossy runs an op the policy codes lossily, hierarchically over hosts
// when they are set. avg is the divisor of an AVG (1 otherwise): the lossy
// reductions divide their float32 sums before the one rounding.
func runLossy(ctx context.Context, conn collective.VarConn, op *Op, a collective.Args, hosts zcoll.Hosts, avg int) error {
	switch op.Kind {
	case opkind.AllGather:
		return lossy.AllGather(ctx, conn, a, op.lossy, hosts)
	case opkind.ReduceScatter:
		return lossy.ReduceScatter(ctx, conn, a, op.lossy, hosts, avg)
	case opkind.AllReduce:
		return lossy.AllReduce(ctx, conn, a, op.lossy, hosts, avg)
	}
	return fmt.Errorf("no lossy algorithm for %s", op.Kind)
}
