package comm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/internal/conntest"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
)

// Ranks that disagree on having a pre-shared key: every rank's op fails
// with a clear error within its timeout, the dialing rank at once; the key
// appears nowhere.
func TestAuthKeyMismatchFailsEveryRank(t *testing.T) {
	key := []byte("never print me")
	r := newRigConfig(t, 2, func(rank int) Config {
		c := Config{Name: "keyed", Timeout: 2 * time.Second}
		if rank == 0 {
			c.AuthKey = key
		}
		return c
	})
	start := time.Now()
	res := r.everyRank(func(int) *Op {
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{f32s(1)}, Out: [][]byte{f32s(1)}}
	})
	require.Less(t, time.Since(start), 10*time.Second)
	require.ErrorContains(t, res[1].err, "this rank has no auth key")
	require.ErrorContains(t, res[0].err, "peer has no auth key")
	for _, x := range res {
		require.NotContains(t, x.err.Error(), string(key))
	}
}

// encryptedOps runs a few collectives on every rank of r and returns their
// outputs.
func encryptedOps(t *testing.T, r *rig) [][]byte {
	n := len(r.comms)
	var outs [][]byte
	data := func(rank, i int) []byte {
		b := make([]byte, 4<<20)
		for j := range b {
			b[j] = byte(j*31 + rank*7 + i)
		}
		return b
	}
	bufs := make([][]byte, n)
	for _, res := range r.everyRank(func(rank int) *Op {
		bufs[rank] = data(rank, 0)
		return &Op{Kind: opkind.AllReduce, DType: dtype.BFloat16, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	}) {
		require.NoError(t, res.err)
	}
	outs = append(outs, bufs...)
	gath := make([][][]byte, n)
	for _, res := range r.everyRank(func(rank int) *Op {
		op := &Op{Kind: opkind.AllGather, DType: dtype.Float32, In: [][]byte{data(rank, 1)[:1<<20]}}
		for j := 0; j < n; j++ {
			op.Out = append(op.Out, make([]byte, 1<<20))
		}
		gath[rank] = op.Out
		return op
	}) {
		require.NoError(t, res.err)
	}
	for _, g := range gath {
		outs = append(outs, bytes.Join(g, nil))
	}
	return outs
}

// Encrypted collectives give the bits unencrypted ones give.
func TestEncryptedCollectivesAreBitIdentical(t *testing.T) {
	plain := newRigWith(t, 3, "plain", 30*time.Second, func(int) map[string]string { return map[string]string{"compress": "always"} })
	sealed := newRigWith(t, 3, "sealed", 30*time.Second, func(int) map[string]string {
		return map[string]string{"compress": "always", "encrypt": "1"}
	})
	want, got := encryptedOps(t, plain), encryptedOps(t, sealed)
	for i := range want {
		require.True(t, bytes.Equal(want[i], got[i]), "output %d", i)
	}
	require.True(t, sealed.comms[0].mesh.Encrypts())
}

// A byte changed on the wire of an encrypted group fails the op on every
// rank, naming the rank whose connection it came on.
func TestTamperedEncryptedFrameFailsEveryRank(t *testing.T) {
	r := newRigConfig(t, 3, func(int) Config {
		return Config{Name: "tamper", Timeout: 10 * time.Second, Options: map[string]string{"encrypt": "1"}}
	})
	// ranks 1 and 2 (the higher rank dials) reach rank 0 through a proxy
	// that flips a byte once the handshake is through (the 36-byte hello
	// and the name, a 32-byte MAC), inside the first sealed record
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr0, err := rendezvous.FetchAddr(ctx, r.comms[0].cfg.Store, 0)
	require.NoError(t, err)
	proxy := conntest.TamperProxy(t, addr0, 36+len("tamper")+32+100)
	require.NoError(t, rendezvous.PublishAddr(r.comms[0].cfg.Store, 0, proxy))
	bufs := make([][]byte, 3)
	start := time.Now()
	res := r.everyRank(func(rank int) *Op {
		bufs[rank] = bytes.Repeat([]byte{byte(rank + 1)}, 1<<20)
		return &Op{Kind: opkind.AllReduce, DType: dtype.Float32, ReduceOp: reduce.Sum, In: [][]byte{bufs[rank]}, Out: [][]byte{bufs[rank]}}
	})
	require.Less(t, time.Since(start), 8*time.Second, "no rank waits for its timeout")
	for rank, x := range res {
		require.Error(t, x.err, "rank %d", rank)
		require.Contains(t, x.err.Error(), "rank ", "rank %d names a peer", rank)
	}
	require.ErrorContains(t, res[0].err, "failed authentication", "the rank that read the tampered frame says so")
}

// An encrypted group keeps CUDA tensors off NCCL, and refuses being told
// to use it.
func TestEncryptedGroupAvoidsNCCL(t *testing.T) {
	t.Setenv("ZIPCCL_GPU_PATH", "")
	for in, want := range map[string]string{"": "coded", "coded": "coded", "staged": "staged"} {
		got, err := encryptedGPUPath(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
	_, err := encryptedGPUPath("nccl")
	require.ErrorContains(t, err, "NCCL's own traffic is not encrypted")
	t.Setenv("ZIPCCL_GPU_PATH", "nccl")
	_, err = encryptedGPUPath("")
	require.ErrorContains(t, err, "gpu_path=nccl")
	t.Setenv("ZIPCCL_GPU_PATH", "staged")
	got, err := encryptedGPUPath("")
	require.NoError(t, err)
	require.Equal(t, "staged", got)
}
