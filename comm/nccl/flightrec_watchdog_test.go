package nccl_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// statesOf returns the state of each entry b's recorder holds now, in order.
func statesOf(t *testing.T, b *nccl.Backend) []string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, b.FlightRecorder().Dump(&buf))
	tr, err := flightrec.ReadTrace(&buf)
	require.NoError(t, err)
	var out []string
	for _, e := range tr.Entries {
		out = append(out, e.ProfilingName+" "+e.State)
	}
	return out
}

// The watchdog's events complete the operations recorded before them: operations that
// nothing waits for are completed in the dump once their work is done, and an
// operation that hangs stays scheduled until the watchdog's timeout dumps it.
func TestFlightRecorderWatchdogCompletesOperations(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "rank_"))
	c, err := commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
		nccl.WithFlightRecorder(16), nccl.WithWatchdog(5*time.Millisecond), nccl.WithTimeout(2*time.Second)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bs := make([]*nccl.Backend, 2)
	bufs := make([]comm.DevicePtr, 2)
	for r := range bs {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
		bufs[r], err = c.Alloc(r, 4096)
		require.NoError(t, err)
	}
	each := func(f func(r int) error) {
		var wg sync.WaitGroup
		errs := make([]error, len(bs))
		for r := range bs {
			wg.Go(func() { errs[r] = f(r) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}

	// Enqueued, never waited for: the watchdog completes them.
	each(func(r int) error { return bs[r].Communicator().AllReduce(bufs[r], 256, comm.Float32, comm.Sum) })
	each(func(r int) error { return bs[r].Communicator().Broadcast(bufs[r], 256, comm.Float32, 0) })
	want := []string{"nccl:all_reduce completed", "nccl:broadcast completed"}
	for r, b := range bs {
		require.Eventually(t, func() bool { return equal(statesOf(t, b), want) }, time.Minute, time.Millisecond,
			"rank %d: %v", r, statesOf(t, b))
	}

	// A hung all-reduce stays scheduled: the watchdog's timeout dumps it so.
	require.NoError(t, c.Hang(0, 1))
	each(func(r int) error { return bs[r].Communicator().AllReduce(bufs[r], 256, comm.Float32, comm.Sum) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	syncs := make([]error, len(bs))
	for r, b := range bs {
		wg.Go(func() { syncs[r] = b.Communicator().Sync(ctx) })
	}
	wg.Wait()
	for r, err := range syncs {
		require.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r)
	}
	tr, err := flightrec.ReadFile(filepath.Join(dir, "rank_0"))
	require.NoError(t, err)
	var got []string
	for _, e := range tr.Entries {
		got = append(got, e.ProfilingName+" "+e.State)
	}
	require.Equal(t, append(want, "nccl:all_reduce scheduled"), got)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
