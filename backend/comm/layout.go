package comm

import (
	"context"
	"errors"
	"fmt"
	"github.com/zipccl/zipccl/backend/collective"
	"os"
	"strings"
	"sync"

	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/zcoll"
)

// layout is the group's ranks grouped by host, learned from the Store the
// first time it is asked for (every rank publishes its host at creation):
// a group that never asks costs no Store reads.
type layout struct {
	mu    sync.Mutex
	hosts [][]int     // nil until learned
	hier  zcoll.Hosts // hosts, when they call for the hierarchical algorithms
}

func (cfg *Config) hostID() string {
	if cfg.HostID != "" {
		return cfg.HostID
	}
	return hosts.ID()
}

// Hosts returns the group's ranks grouped by host, in group-rank order
// (hosts.Group), waiting for ranks that have not created the group yet
// until ctx ends.
func (c *Comm) Hosts(ctx context.Context) ([][]int, error) {
	c.layout.mu.Lock()
	defer c.layout.mu.Unlock()
	if c.layout.hosts != nil {
		return c.layout.hosts, nil
	}
	ids := make([]string, c.cfg.Size)
	ids[c.cfg.Rank] = c.cfg.hostID()
	// a few reads at a time: one round trip each, thousands in a big group
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for r := range ids {
		if r == c.cfg.Rank {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ids[r], errs[r] = rendezvous.FetchHost(ctx, c.cfg.Store, r)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c.layout.hosts = hosts.Group(ids)
	if hs := zcoll.Hosts(c.layout.hosts); hs.Hierarchical(c.cfg.Size) {
		c.layout.hier = hs
	}
	c.log.Infof("hosts: %s", describeHosts(c.layout.hosts))
	return c.layout.hosts, nil
}

// describeHosts says "2 hosts: ranks 0 1 | 2 3" for the log.
func describeHosts(h [][]int) string {
	parts := make([]string, len(h))
	for i, ranks := range h {
		parts[i] = strings.Trim(fmt.Sprint(ranks), "[]")
	}
	n := "1 host"
	if len(h) != 1 {
		n = fmt.Sprintf("%d hosts", len(h))
	}
	return n + ": ranks " + strings.Join(parts, " | ")
}

// hierarchyOption reads the group option hierarchy (else
// ZIPCCL_HIERARCHY): "auto" (the default) runs all_reduce, reduce_scatter,
// all_gather and broadcast hierarchically where the group spans hosts of
// several ranks (reduce_scatter and all_gather on equal hosts only); "all"
// every op wherever it can, all_to_all included; "flat" none. Every rank must agree
// (the op descriptor carries the choice).
func hierarchyOption(opts map[string]string) (flat, all bool, err error) {
	v, ok := opts["hierarchy"]
	if !ok {
		v = os.Getenv("ZIPCCL_HIERARCHY")
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto":
		return false, false, nil
	case "all":
		return false, true, nil
	case "flat":
		return true, false, nil
	}
	return false, false, fmt.Errorf("zipccl: hierarchy=%q: want auto, all or flat", v)
}

// hierarchy is the layout op runs hierarchically on, or nil for the flat
// algorithms: all_reduce, reduce_scatter, all_gather, broadcast (above the
// size the root sends directly to every rank) and, with hierarchy=all,
// all_to_all, of host memory, on a group whose hosts hold several of its
// ranks (zcoll.Hosts.Hierarchical, judged once, when the layout is learned
// from the Store by the first call). On hosts of different sizes
// all_to_all runs flat, and reduce_scatter and all_gather run
// hierarchically only with hierarchy=all: they then carry fewer bytes over
// the larger hosts' links, but the smallest host's link carries what flat
// sends it, and it is the bottleneck (on 3 + 1 and 2 + 1 + 1 hosts at
// 1 Gbit/s they took 1.15x to 1.43x flat's time, benchmarks/RESULTS.md).
//
// all_to_all is hierarchical only when asked for: its host links carry the
// same bytes either way (each off-host block once), so the rails save only
// messages (R per pair of hosts where flat sends R*R), and pay an extra hop
// inside the host, copies, and a round of lengths. On 2 hosts of 2 and of 4
// ranks (the netns harness, 1 and 10 Gbit/s) that made it slower than flat
// at every size tried, 4 KiB to 32 MiB a rank (docs/ARCHITECTURE.md). A
// size threshold could not be chosen here anyway: a rank knows only its
// own splits, and the choice, which the op descriptor carries, must be the
// same on every rank before the data moves.
func (c *Comm) hierarchy(ctx context.Context, op *Op) (zcoll.Hosts, error) {
	if c.flat || op.Dev != nil {
		return nil, nil
	}
	switch op.Kind {
	case opkind.AllReduce, opkind.ReduceScatter, opkind.AllGather:
	case opkind.AllToAll:
		if !c.hierAll {
			return nil, nil
		}
	case opkind.Broadcast:
		if len(op.Out[0])*(c.cfg.Size-1) <= collective.BroadcastDirectMax {
			return nil, nil
		}
	default:
		return nil, nil
	}
	if _, err := c.Hosts(ctx); err != nil {
		return nil, err
	}
	c.layout.mu.Lock()
	defer c.layout.mu.Unlock()
	h := c.layout.hier
	if h != nil && !h.Equal() {
		switch op.Kind {
		case opkind.AllToAll:
			return nil, nil // equal hosts only
		case opkind.ReduceScatter, opkind.AllGather:
			if !c.hierAll {
				return nil, nil // fewer host-link bytes, but not faster: opt-in
			}
		}
	}
	return h, nil
}
