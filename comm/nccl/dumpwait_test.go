package nccl

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// TestDumpDoesNotWaitForAHungOperation dumps the flight recorder while an operation
// waits for NCCL to leave ncclInProgress (a non-blocking communicator whose peer never
// joins: the wait a hang is made of) holding the communicator's lock: the dump is
// written at once, with the waiting operation in it, instead of waiting for the hang.
func TestDumpDoesNotWaitForAHungOperation(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet, WithFlightRecorder(8))
	require.NotNil(t, b.FlightRecorder())
	f.Fail("AllReduce", &gpulib.Error{Code: gpulib.InProgress})
	f.InitPolls.Store(1 << 30) // NCCL stays in progress until the test lets it settle
	done := make(chan error, 1)
	go func() { done <- b.AllReduceAsync(p, 4096, 3) }()
	// Wait until the operation polls: it is then in its wait, under the lock.
	for deadline := time.Now().Add(time.Minute); len(f.Named("CommGetAsyncError")) < 3; {
		require.True(t, time.Now().Before(deadline), "the operation never waited")
		time.Sleep(time.Millisecond)
	}
	var buf bytes.Buffer
	dumped := make(chan error, 1)
	go func() { dumped <- b.FlightRecorder().Dump(&buf) }()
	var (
		dumpErr error
		inTime  bool
	)
	select {
	case dumpErr = <-dumped:
		inTime = true
	case <-time.After(30 * time.Second):
	}
	f.InitPolls.Store(0) // let the operation settle, dumped or not
	require.NoError(t, <-done)
	if !inTime {
		dumpErr = <-dumped
	}
	require.True(t, inTime, "the dump waited for the operation to end")
	require.NoError(t, dumpErr)
	tr, err := flightrec.ReadTrace(&buf)
	require.NoError(t, err)
	require.NotEmpty(t, tr.Entries)
	last := tr.Entries[len(tr.Entries)-1]
	require.Equal(t, "all_reduce", last.Op(), "the waiting operation is in the dump")
	require.NotEqual(t, "completed", last.State)
}

// TestAsyncAndTwoRankReductionsAreRecorded checks that the flight recorder sees every
// all-reduce a rank makes, whichever path carries it: AllReduceAsync and the two-rank
// send/receive path (blocking and async) record an all_reduce of the element count,
// as ncclAllReduce would, so that a hang in one of them is in the dump.
func TestAsyncAndTwoRankReductionsAreRecorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		two  bool
		call func(b *Backend) error
	}{
		{"async", false, func(b *Backend) error { return b.AllReduceAsync(p, 4096, 3) }},
		{"two-rank", true, func(b *Backend) error { return b.AllReduce(p, 4096) }},
		{"two-rank async", true, func(b *Backend) error { return b.AllReduceAsync(p, 4096, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakegpu.New()
			var b *Backend
			if tc.two {
				b = newTwoRank(t, f, 0, WithFlightRecorder(8))
			} else {
				b = newFakeNCCL(t, f, 0, 2, quiet, WithFlightRecorder(8))
			}
			require.NoError(t, tc.call(b))
			var buf bytes.Buffer
			require.NoError(t, b.FlightRecorder().Dump(&buf))
			tr, err := flightrec.ReadTrace(&buf)
			require.NoError(t, err)
			require.Len(t, tr.Entries, 1)
			require.Equal(t, "all_reduce", tr.Entries[0].Op())
			require.Equal(t, [][]int64{{int64(4096 / b.size)}}, tr.Entries[0].InputSizes, "elements of the backend's type")
		})
	}
}

// TestFailureErrorsWaitForTheFailureDump: when two goroutines see a communicator fail
// at once (an operation's timeout and the watchdog's), the one that records the fault
// second returns its error only once the first one's dump is written, so that a user
// who reads the dump on that error finds it. The dump here is held back by the
// communicator's lock (a ring's lock, as a settle inside an enqueued call holds it).
// Before, the second goroutine returned at once, with no dump on disk.
func TestFailureErrorsWaitForTheFailureDump(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "rank_"))
	b := newFakeNCCL(t, fakegpu.New(), 0, 2, quiet, WithFlightRecorder(8))
	require.NoError(t, b.AllReduce(p, 4096))
	c := b.c
	c.mu.Lock()
	first := make(chan error, 1)
	go func() { first <- c.fail(errors.New("first failure")) }()
	for deadline := time.Now().Add(time.Minute); !c.faulted.Load(); {
		require.True(t, time.Now().Before(deadline), "the first failure was never recorded")
		time.Sleep(time.Millisecond)
	}
	second := make(chan error, 1)
	go func() { second <- c.fail(errors.New("second failure")) }()
	select {
	case <-second:
		c.mu.Unlock()
		t.Fatal("the second failure returned before the first one's dump was written")
	case <-time.After(100 * time.Millisecond):
	}
	c.mu.Unlock() // the dump goes on and is written
	require.ErrorIs(t, <-second, comm.ErrUnhealthy)
	tr, err := flightrec.ReadFile(filepath.Join(dir, "rank_0"))
	require.NoError(t, err, "no dump on disk when the failure's error came back")
	require.NotEmpty(t, tr.Entries)
	require.ErrorIs(t, <-first, comm.ErrUnhealthy)
}

// reentrantHandler is a log handler that, on the failure's warning, reports another
// failure of the same communicator from inside the log call.
type reentrantHandler struct {
	slog.Handler
	c         *Communicator
	reentered bool
}

func (h *reentrantHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *reentrantHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "comm: communicator failed" && h.c != nil {
		h.reentered = true
		_ = h.c.fail(errors.New("reported by the log handler"))
	}
	return nil
}

// TestFailureFromTheLogHandlerDoesNotHang: a failure reported from inside the log
// call of the first one (before its dump) waits for that dump a bounded time only.
func TestFailureFromTheLogHandlerDoesNotHang(t *testing.T) {
	h := &reentrantHandler{Handler: slog.DiscardHandler}
	b := newFakeNCCL(t, fakegpu.New(), 0, 2, WithLogger(slog.New(h)), WithFlightRecorder(8))
	h.c = b.c
	done := make(chan error, 1)
	go func() { done <- b.c.fail(errors.New("first failure")) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, comm.ErrUnhealthy)
	case <-time.After(time.Minute):
		t.Fatal("a failure reported from the log handler hung the first one")
	}
	require.True(t, h.reentered, "the log handler was not called")
}
