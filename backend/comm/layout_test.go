package comm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/transport"
)

// Every rank learns the same layout from the Store, hosts of unequal size
// and interleaved ranks included.
func TestHostsFromTheStore(t *testing.T) {
	ids := []string{"b", "a", "b", "b", "c"}
	r := newRigConfig(t, len(ids), func(rank int) Config {
		return Config{Name: "hosts", Timeout: 10 * time.Second, HostID: ids[rank]}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range r.comms {
		h, err := c.Hosts(ctx)
		require.NoError(t, err)
		require.Equal(t, [][]int{{0, 2, 3}, {1}, {4}}, h)
	}
	require.Equal(t, "3 hosts: ranks 0 2 3 | 1 | 4", describeHosts([][]int{{0, 2, 3}, {1}, {4}}))
	require.Equal(t, "1 host: ranks 0 1", describeHosts([][]int{{0, 1}}))
}

// Without a host id set, ranks of one process share one host.
func TestHostsDefaultIsThisHost(t *testing.T) {
	r := newRig(t, 3, 10*time.Second)
	h, err := r.comms[1].Hosts(context.Background())
	require.NoError(t, err)
	require.Equal(t, [][]int{{0, 1, 2}}, h)
}

// A rank that never created the group: the wait ends with ctx, naming it.
func TestHostsWaitEndsWithContext(t *testing.T) {
	ep, err := transport.Listen("127.0.0.1")
	require.NoError(t, err)
	defer ep.Close()
	c, err := New(Config{Name: "alone", Rank: 0, Size: 2, Timeout: time.Second, Store: rendezvous.NewMemStore(),
		Endpoint: ep, Complete: func(uint64, int, error) {}})
	require.NoError(t, err)
	defer c.Abort("test over")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Hosts(ctx)
	require.ErrorContains(t, err, "host of rank 1")
}
