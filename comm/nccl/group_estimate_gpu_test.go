//go:build gpu && cgo

package nccl

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// TestGPUGroupEstimateKeepsTheGroupForSubmit estimates a Group on the real GPU and
// libnccl (one blocking rank: a send/recv to itself and an all-reduce of 1 MiB):
// Estimate returns NCCL's estimate without launching (the receive buffer is unchanged
// after the stream drains), and Submit then launches the kept operations (the exchange
// lands). A non-blocking communicator is refused.
func TestGPUGroupEstimateKeepsTheGroupForSubmit(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithBlocking(true), WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()

	const big = 1 << 20
	runtime.LockOSThread()
	require.NoError(t, b.c.d.SetDevice())
	buf, err := b.c.d.MemAlloc(128 + big)
	require.NoError(t, err)
	runtime.UnlockOSThread()
	defer func() { _ = b.c.d.MemFree(buf) }()
	in := make([]byte, 128)
	for i := range 64 {
		in[i] = byte(i + 1)
	}
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(buf), in))
	ptr := comm.DevicePtr(buf)

	g := NewGroup()
	require.NoError(t, g.Add(func() error {
		if err := b.SendTo(ptr, 64, 0, 0); err != nil {
			return err
		}
		if err := b.RecvFrom(ptr+64, 64, 0, 0); err != nil {
			return err
		}
		return b.AllReduce(ptr+128, big)
	}))
	est, err := g.Estimate()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, est, time.Duration(0))
	t.Logf("NCCL's estimate of the group on one rank: %v", est)
	require.NoError(t, b.Communicator().Sync(ctx))
	out := make([]byte, 128)
	require.NoError(t, cudatest.Download(out, cuda.Deviceptr(buf)))
	assert.Equal(t, make([]byte, 64), out[64:], "estimate launched nothing")

	require.NoError(t, g.Submit())
	require.NoError(t, b.Communicator().Sync(ctx))
	require.NoError(t, cudatest.Download(out, cuda.Deviceptr(buf)))
	assert.Equal(t, in[:64], out[64:], "submit launched the kept exchange")

	nb, err := New(ctx, mustID(t), 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, nb.Close()) }()
	require.NoError(t, g.Add(func() error { return nb.AllReduce(ptr+128, big) }))
	_, err = g.Estimate()
	require.ErrorIs(t, err, comm.ErrUnsupported, "non-blocking communicators")
	require.NoError(t, g.Discard())
}

func mustID(t *testing.T) comm.UniqueID {
	t.Helper()
	id, err := NewUniqueID()
	require.NoError(t, err)
	return id
}
