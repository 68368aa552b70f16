package comm

import (
	"context"
	"fmt"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// runZcoll runs the zcoll family (plain or coded, as decided) for op, its
// segments coded by co (nil: on the host), hierarchically over t.hosts when
// set (uncoded inside a host, as decided across hosts).
func (c *Comm) runZcoll(ctx context.Context, conn *opConn, op *Op, a collective.Args, t *task, co zcoll.Coder) error {
	var st zcoll.Stats
	za := zcoll.Args{Args: a, Stats: &st, Plan: zcoll.Plan{Framed: t.decision.Coded, Kind: t.decision.Kind, A2ADesign: 2}, Coder: co}
	defer func() {
		t.codecNs.Add(st.EncodeNs.Load() + st.DecodeNs.Load())
		t.uncoded.Store(st.SentRaw.Load())
	}()
	if t.hosts != nil {
		switch op.Kind {
		case opkind.AllReduce:
			return zcoll.HierAllReduce(ctx, conn, za, t.hosts)
		case opkind.ReduceScatter:
			return zcoll.HierReduceScatter(ctx, conn, za, t.hosts)
		case opkind.AllGather:
			return zcoll.HierAllGather(ctx, conn, za, t.hosts)
		case opkind.Broadcast:
			return zcoll.HierBroadcast(ctx, conn, za, t.hosts)
		case opkind.AllToAll:
			return zcoll.HierAllToAll(ctx, conn, za, t.hosts)
		}
	}
	switch op.Kind {
	case opkind.AllReduce:
		return zcoll.AllReduce(ctx, conn, za)
	case opkind.ReduceScatter:
		return zcoll.ReduceScatter(ctx, conn, za)
	case opkind.AllGather:
		return zcoll.AllGather(ctx, conn, za)
	case opkind.AllToAll:
		return zcoll.AllToAll(ctx, conn, za)
	case opkind.Broadcast:
		return zcoll.Broadcast(ctx, conn, za)
	}
	return fmt.Errorf("no coded algorithm for %s", op.Kind)
}
