//go:build gpu && cgo

package job

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/raw/cuda"
)

// TestGPUConnectWithWatchdog brings a one-rank job up through Connect on the real GPU
// and libraries (rank 0 serves the store, NCCL's own unique id), with the watchdog
// recording its events on the communication stream from its own thread, then checks
// that the backend works, stays healthy, reconnects in the next generation, and closes
// with nothing left running.
func TestGPUConnectWithWatchdog(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	leaktest.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Connect(ctx, WithJob(jobOf(freePort(t), 0, 1)), WithNCCL(nccl.WithElementType(comm.Float32),
		nccl.WithWatchdog(5*time.Millisecond), nccl.WithTimeout(30*time.Second)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close()) }()
	c := b.Communicator()
	sym, err := b.SymmetricAlloc(1 << 20)
	require.NoError(t, err)
	for range 50 {
		require.NoError(t, c.AllReduce(sym, 1024, comm.Float32, comm.Sum))
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, c.Sync(ctx))
	time.Sleep(20 * time.Millisecond)
	assert.True(t, b.IsHealthy())
	require.NoError(t, b.AttemptReconnect(ctx))
	assert.Equal(t, uint64(1), memberOf(b).generation())
	require.NoError(t, b.AllReduce(sym, 4096))
	assert.True(t, b.IsHealthy())
	require.NoError(t, b.SymmetricFree(sym))
}
