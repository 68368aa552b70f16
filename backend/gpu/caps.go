package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Capabilities: each rank publishes what it can do on its GPU in the
// group's Store at its first CUDA op, and an op's plan folds those of the
// ranks it involves (agree, in plan.go).

// publishCaps publishes this rank's capabilities once.
func (g *Group) publishCaps() error {
	if g.mine != nil {
		return nil
	}
	c := g.env.caps(g.cfg.Rank, g.device)
	if g.cfg.Forced != "" {
		c.Forced = g.cfg.Forced
	}
	js, _ := json.Marshal(c)
	if err := g.cfg.Store.Set(g.key("caps", g.cfg.Rank), js); err != nil {
		return fmt.Errorf("publishing this rank's GPU capabilities: %w", err)
	}
	g.mine = &c
	if c.NCCLVersion == 0 || !c.Kernels || c.Forced != "" {
		g.log.Infof("GPU path on cuda:%d: NCCL %s, CUDA kernels %s%s", g.device,
			orText(c.NCCLVersion != 0, versionString(c.NCCLVersion), c.NCCLError),
			orText(c.Kernels, "loaded", c.KernelsErr), orText(c.Forced == "", "", ", ZIPCCL_GPU_PATH="+c.Forced))
	}
	return nil
}

func orText(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func (g *Group) fetchCaps(ctx context.Context, rank int) (Caps, error) {
	if rank == g.cfg.Rank {
		return *g.mine, nil
	}
	js, err := g.cfg.Store.Get(ctx, g.key("caps", rank))
	if err != nil {
		return Caps{}, fmt.Errorf("waiting for rank %d's GPU capabilities (every rank publishes them at its first CUDA op): %w", rank, err)
	}
	var c Caps
	if err := json.Unmarshal(js, &c); err != nil {
		return Caps{}, fmt.Errorf("rank %d's GPU capabilities are unreadable: %w", rank, err)
	}
	return c, nil
}

// agreementFor returns what the ranks op involves can do together: the
// whole group for collectives, the two ends for point-to-point ops.
func (g *Group) agreementFor(op *Op, deadline time.Time) (agreement, error) {
	if err := g.publishCaps(); err != nil {
		return agreement{}, err
	}
	ctx, cancel := context.WithDeadline(g.cfg.Ctx, deadline)
	defer cancel()
	if op.Kind.IsP2P() && op.Root >= 0 {
		if a := g.pair[op.Root]; a != nil {
			return *a, nil
		}
		peer, err := g.fetchCaps(ctx, op.Root)
		if err != nil {
			return agreement{}, err
		}
		caps := []Caps{*g.mine, peer}
		sort.Slice(caps, func(i, j int) bool { return caps[i].Rank < caps[j].Rank })
		a := agree(caps, g.env.Topology(), g.env.host)
		g.pair[op.Root] = &a
		return a, nil
	}
	if g.coll == nil {
		caps := make([]Caps, g.cfg.Size)
		for r := range caps {
			c, err := g.fetchCaps(ctx, r)
			if err != nil {
				return agreement{}, err
			}
			caps[r] = c
		}
		a := agree(caps, g.env.Topology(), g.env.host)
		g.coll = &a
		g.profile.NoCompress = a.nvlink
		g.log.Infof("GPU path on cuda:%d: NCCL %s on every rank: %v; CUDA kernels on every rank: %v; %s",
			g.device, versionString(a.ncclVersion), a.nccl, a.kernels, a.nvlinkWhy)
	}
	return *g.coll, nil
}
