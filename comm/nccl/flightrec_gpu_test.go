//go:build gpu && cgo

package nccl

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/raw/cuda"
)

// TestGPUTimeoutDumpsFlightRecord: on the real GPU and libraries, a send without its
// receive (to itself, in a one-rank world) never completes; the wait times out, the
// communicator fails, and the flight recorder dumps: the file holds the all-reduce
// that completed and the send, not completed.
func TestGPUTimeoutDumpsFlightRecord(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "nccl_trace_rank_"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(5*time.Second),
		WithCloseTimeout(time.Second), WithFlightRecorder(flightrec.DefaultEntries))
	require.NoError(t, err)
	defer func() { _ = b.Close() }() // aborts: the send is still in flight
	c := b.Communicator()
	buf, err := b.SymmetricAlloc(64)
	if errors.Is(err, comm.ErrUnsupported) {
		t.Skipf("no ncclMemAlloc: %v", err)
	}
	require.NoError(t, err)

	require.NoError(t, b.AllReduce(buf, 64))
	require.NoError(t, c.Send(buf, 4, comm.Float32, 0, 0))
	require.ErrorIs(t, c.Sync(ctx), comm.ErrTimeout)

	tr, err := flightrec.ReadFile(filepath.Join(dir, "nccl_trace_rank_0"))
	require.NoError(t, err, "no dump after the timeout")
	require.Len(t, tr.Entries, 2)
	require.Equal(t, "nccl:all_reduce", tr.Entries[0].ProfilingName)
	require.Equal(t, "completed", tr.Entries[0].State)
	require.Equal(t, "nccl:send 0->0", tr.Entries[1].ProfilingName)
	require.NotEqual(t, "completed", tr.Entries[1].State)
}
