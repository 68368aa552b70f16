package comm

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/zipccl/zipccl/backend/hosts"
	"github.com/zipccl/zipccl/backend/rendezvous"
)

// layout is the group's ranks grouped by host, learned from the Store the
// first time it is asked for (every rank publishes its host at creation):
// a group that never asks costs no Store reads.
type layout struct {
	mu    sync.Mutex
	hosts [][]int // nil until learned
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
	for r := range ids {
		if r == c.cfg.Rank {
			continue
		}
		id, err := rendezvous.FetchHost(ctx, c.cfg.Store, r)
		if err != nil {
			return nil, err
		}
		ids[r] = id
	}
	c.layout.hosts = hosts.Group(ids)
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
