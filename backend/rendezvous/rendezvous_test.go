package rendezvous

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSecretAndAddressRoundTrip(t *testing.T) {
	s := NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got := make(chan []byte, 1)
	go func() {
		v, err := FetchSecret(ctx, s) // waits for rank 0
		require.NoError(t, err)
		got <- v
	}()
	secret, err := PublishSecret(s)
	require.NoError(t, err)
	require.Len(t, secret, SecretLen)
	require.Equal(t, secret, <-got)
	other, err := PublishSecret(NewMemStore())
	require.NoError(t, err)
	require.NotEqual(t, secret, other, "every group draws a fresh secret")

	require.NoError(t, PublishAddr(s, 3, "10.0.0.3:1234"))
	addr, err := FetchAddr(ctx, s, 3)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.3:1234", addr)
}

func TestGetHonoursDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := FetchAddr(ctx, NewMemStore(), 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Empty(t, AbortReport(ctx, NewMemStore()))
}

func TestInterfaceSelection(t *testing.T) {
	t.Setenv("ZIPCCL_SOCKET_IFNAME", "lo")
	ip, how, err := LocalIP()
	require.NoError(t, err)
	require.True(t, ip.IsLoopback(), "lo has a loopback address, got %v", ip)
	require.Contains(t, how, "ZIPCCL_SOCKET_IFNAME=lo")

	t.Setenv("ZIPCCL_SOCKET_IFNAME", "nosuchif0,lo")
	ip, _, err = LocalIP()
	require.NoError(t, err)
	require.True(t, ip.IsLoopback(), "the first existing interface of the list is used")

	t.Setenv("ZIPCCL_SOCKET_IFNAME", "nosuchif0")
	_, _, err = LocalIP()
	require.ErrorContains(t, err, "nosuchif0")

	t.Setenv("ZIPCCL_SOCKET_IFNAME", "")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	ip, how, err = LocalIP()
	require.NoError(t, err)
	require.True(t, ip.Equal(net.IPv4(127, 0, 0, 1)))
	require.Contains(t, how, "MASTER_ADDR")
}
