package commtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/nccl"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// oneSidedPair is two ranks with an inbox and an outbox window each.
func oneSidedPair(t *testing.T, opts ...commtest.Option) (*commtest.Cluster, [2]*nccl.Backend, [2]comm.DevicePtr, [2]nccl.WindowHandle) {
	t.Helper()
	c, err := commtest.NewCluster(2, append([]commtest.Option{commtest.WithElementType(comm.BFloat16)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	var bs [2]*nccl.Backend
	var mem [2]comm.DevicePtr
	var inbox [2]nccl.WindowHandle
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eachBackend(t, c, func(r int, b *nccl.Backend) error {
		bs[r] = b
		var err error
		if mem[r], err = b.SymmetricAlloc(2 * 4096); err != nil {
			return err
		}
		if inbox[r], err = b.RegisterWindow(ctx, mem[r], 4096); err != nil {
			return err
		}
		_, err = b.RegisterWindow(ctx, mem[r]+4096, 4096)
		return err
	})
	return c, bs, mem, inbox
}

// A put lands in the peer's window at its offset only when the sender's stream reaches
// it, a wait holds the receiver's stream until the signal has arrived, and each wait
// consumes the signals it waited for: a second wait needs a second signal.
func TestPutSignalOrderAndWaitConsumes(t *testing.T) {
	c, bs, mem, inbox := oneSidedPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := mem[0] + 4096
	require.NoError(t, c.Write(0, src, []byte("kv-block")))

	s0, err := c.NewStream(0)
	require.NoError(t, err)
	release, err := c.HoldStream(0, s0)
	require.NoError(t, err)
	require.NoError(t, bs[0].PutSignal(src, 8, 1, inbox[0], 100, nccl.Signal{}, s0))
	s1, err := c.NewStream(1)
	require.NoError(t, err)
	require.NoError(t, bs[1].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}}, s1))
	time.Sleep(20 * time.Millisecond)
	got, err := c.Read(1, mem[1]+100, 8)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 8), got, "the put ran before its stream reached it")
	done := make(chan error, 1)
	go func() { done <- c.SyncStream(1, s1) }()
	select {
	case err := <-done:
		t.Fatalf("the wait let its stream go on before the signal came: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	release()
	require.NoError(t, <-done)
	got, err = c.Read(1, mem[1]+100, 8)
	require.NoError(t, err)
	assert.Equal(t, "kv-block", string(got), "the put landed in the peer's window at its offset")

	// The signal was consumed: the next wait needs another one (a Signal without data).
	require.NoError(t, bs[1].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}}, s1))
	go func() { done <- c.SyncStream(1, s1) }()
	select {
	case err := <-done:
		t.Fatalf("a second wait went through on a consumed signal: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	require.NoError(t, bs[0].Signal(1, nccl.Signal{}, 0))
	require.NoError(t, <-done)
	require.NoError(t, bs[0].Communicator().Sync(ctx))
	p, err := bs[1].WindowUserPtr(inbox[1])
	require.NoError(t, err)
	assert.Equal(t, mem[1], p, "the window's user pointer is the buffer it was registered with")
}

// A WaitSignal whose signal never comes is a hang: the communicator's next wait fails
// with ErrTimeout and the communicator is unhealthy.
func TestWaitSignalNeverSignalledTimesOut(t *testing.T) {
	_, bs, _, _ := oneSidedPair(t, commtest.WithCommOptions(nccl.WithTimeout(300*time.Millisecond)))
	require.NoError(t, bs[1].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 2}}, 0))
	require.NoError(t, bs[0].Signal(1, nccl.Signal{}, 0)) // one of the two
	err := bs[1].Communicator().Sync(context.Background())
	require.ErrorIs(t, err, comm.ErrTimeout)
	var oe *comm.OpError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, 1, oe.Rank)
}

// Bad input is refused with a typed error naming the argument, before the library.
func TestOneSidedBadInput(t *testing.T) {
	c, bs, mem, inbox := oneSidedPair(t)
	b := bs[0]
	src := mem[0] + 4096
	before := c.DriverCalls()
	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"peer out of range":    {b.PutSignal(src, 8, 2, inbox[0], 0, nccl.Signal{}, 0), comm.ErrInvalidRank},
		"negative bytes":       {b.PutSignal(src, -1, 1, inbox[0], 0, nccl.Signal{}, 0), comm.ErrInvalidSize},
		"null source":          {b.PutSignal(0, 8, 1, inbox[0], 0, nccl.Signal{}, 0), comm.ErrNullPointer},
		"unknown window":       {b.PutSignal(src, 8, 1, 999, 0, nccl.Signal{}, 0), comm.ErrUnknownHandle},
		"past the window":      {b.PutSignal(src, 8, 1, inbox[0], 4090, nccl.Signal{}, 0), comm.ErrInvalidSize},
		"negative offset":      {b.PutSignal(src, 8, 1, inbox[0], -8, nccl.Signal{}, 0), comm.ErrInvalidSize},
		"source not in window": {b.PutSignal(0x1000, 8, 1, inbox[0], 0, nccl.Signal{}, 0), comm.ErrUnknownPointer},
		"signal peer":          {b.Signal(-1, nccl.Signal{}, 0), comm.ErrInvalidRank},
		"wait nothing":         {b.WaitSignal(nil, 0), comm.ErrInvalidSize},
		"wait zero count":      {b.WaitSignal([]nccl.SignalWait{{Peer: 1}}, 0), comm.ErrInvalidSize},
		"wait peer":            {b.WaitSignal([]nccl.SignalWait{{Peer: 5, Count: 1}}, 0), comm.ErrInvalidRank},
		"user ptr of unknown":  {func() error { _, err := b.WindowUserPtr(77); return err }(), comm.ErrUnknownHandle},
		"unknown window flag":  {func() error { _, err := b.RegisterWindow(context.Background(), src, 4096, 8); return err }(), comm.ErrUnsupported},
		"other flags, same buf": {func() error {
			_, err := b.RegisterWindow(context.Background(), src, 4096, nccl.WindowDefault)
			return err
		}(), comm.ErrUnsupported},
	} {
		assert.ErrorIs(t, tc.err, tc.want, name)
	}
	assert.Equal(t, before, c.DriverCalls(), "bad input reached the library")

	// What only NCCL checks comes back as NCCL's error: signal index and context
	// other than 0 (NCCL 2.29 accepts no others).
	err := b.Signal(1, nccl.Signal{Index: 1}, 0)
	assert.ErrorIs(t, err, rawnccl.InvalidArgument)
}

// The simulated NCCLs before 2.29.2 refuse with the version that has the calls, before
// calling the library.
func TestOneSidedVersionGate(t *testing.T) {
	for _, v := range []int{21803, 22203} {
		c, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16), commtest.WithNCCLVersion(v))
		require.NoError(t, err)
		b, err := c.NCCL(0)
		require.NoError(t, err)
		before := c.DriverCalls()
		for name, err := range map[string]error{
			"put":  b.PutSignal(0x1000, 8, 1, 1, 0, nccl.Signal{}, 0),
			"sig":  b.Signal(1, nccl.Signal{}, 0),
			"wait": b.WaitSignal([]nccl.SignalWait{{Peer: 1, Count: 1}}, 0),
			"ptr":  func() error { _, err := b.WindowUserPtr(1); return err }(),
		} {
			require.ErrorIs(t, err, comm.ErrUnsupported, name)
			assert.Contains(t, err.Error(), "needs NCCL 2.29.2", name)
		}
		assert.Equal(t, before, c.DriverCalls())
		require.NoError(t, c.Close())
	}
}

// A WaitSignal whose signals never all come: the timeout writes the waiting rank's
// flight record, and the analysis commtrace prints names the wait and the rank that
// did not send.
func TestFlightRecorderNamesTheMissingSignal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", dir+"/fr_")
	_, bs, _, _ := oneSidedPair(t, commtest.WithCommOptions(nccl.WithFlightRecorder(64), nccl.WithTimeout(300*time.Millisecond)))
	ctx := context.Background()
	require.NoError(t, bs[1].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 2}}, 0))
	require.NoError(t, bs[0].Signal(1, nccl.Signal{}, 0)) // one of the two
	require.NoError(t, bs[0].Communicator().Sync(ctx))
	require.ErrorIs(t, bs[1].Communicator().Sync(ctx), comm.ErrTimeout)
	_, err := bs[0].FlightRecorder().WriteFile()
	require.NoError(t, err)

	traces, err := flightrec.ReadDir(dir, "fr_")
	require.NoError(t, err)
	require.Len(t, traces, 2, "both ranks' dumps (the timeout wrote rank 1's)")
	var report strings.Builder
	require.NoError(t, flightrec.Report(&report, flightrec.Analyze(traces)))
	t.Log(report.String())
	assert.Contains(t, report.String(), "unmatched ranks [0]", "rank 0 did not send\n%s", report.String())
	assert.Contains(t, report.String(), "wait_signal 1<-0", "the wait is named\n%s", report.String())
}

// A WaitSignal on the communication stream whose signal never comes is a stuck
// operation to the watchdog: without any call waiting on it, the backend turns
// unhealthy once the operation timeout has passed, and the recorder's dump (written by
// that failure) holds the wait, not completed.
func TestWatchdogNamesAStuckWaitSignal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", dir+"/fr_")
	_, bs, _, _ := oneSidedPair(t, commtest.WithCommOptions(nccl.WithFlightRecorder(64), nccl.WithTimeout(200*time.Millisecond),
		nccl.WithWatchdog(20*time.Millisecond)))
	require.NoError(t, bs[1].WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}}, 0))
	deadline := time.Now().Add(time.Minute) // a hang guard, not a timing
	for bs[1].IsHealthy() {
		require.True(t, time.Now().Before(deadline), "the watchdog never noticed the stuck wait")
		time.Sleep(10 * time.Millisecond)
	}
	assert.True(t, bs[0].IsHealthy(), "the rank that did not signal is not stuck itself")
	var trace *flightrec.Trace
	for trace == nil {
		traces, err := flightrec.ReadDir(dir, "fr_")
		if err == nil && len(traces) == 1 {
			trace = traces[0]
			break
		}
		require.True(t, time.Now().Before(deadline), "no dump from rank 1: %v", err)
		time.Sleep(10 * time.Millisecond)
	}
	var found bool
	for _, e := range trace.Entries {
		if e.Op() == "wait_signal" {
			found = true
			assert.Equal(t, "nccl:wait_signal 1<-0", e.ProfilingName)
			assert.NotEqual(t, "completed", e.State)
		}
	}
	assert.True(t, found, "the dump has the wait")
}

// A failure of the library's ncclPutSignal reaches the caller as an *OpError naming the
// rank and the peer; NCCL's system error is fatal, so the backend turns unhealthy.
func TestPutSignalLibraryFailure(t *testing.T) {
	c, bs, mem, inbox := oneSidedPair(t)
	require.NoError(t, c.FailCall(0, "ncclPutSignal", 1))
	err := bs[0].PutSignal(mem[0]+4096, 8, 1, inbox[0], 0, nccl.Signal{}, 0)
	require.ErrorIs(t, err, commtest.ErrInjected)
	var oe *comm.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, 0, oe.Rank)
	assert.Equal(t, 1, oe.Peer)
	assert.False(t, bs[0].IsHealthy())
	n, err := c.Calls(0, "ncclPutSignal")
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}

// While its backend is suspended a one-sided call fails at once with ErrSuspended and
// never reaches the library; after Close it fails with ErrClosed.
func TestOneSidedCallsRefusedWhileSuspendedOrClosed(t *testing.T) {
	c, bs, mem, inbox := oneSidedPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eachBackend(t, c, func(_ int, b *nccl.Backend) error { return b.Suspend(ctx) })
	calls := func(call string) int64 {
		n, err := c.Calls(0, call)
		require.NoError(t, err)
		return n
	}
	puts, signals := calls("ncclPutSignal"), calls("ncclSignal")
	require.ErrorIs(t, bs[0].PutSignal(mem[0]+4096, 8, 1, inbox[0], 0, nccl.Signal{}, 0), nccl.ErrSuspended)
	require.ErrorIs(t, bs[0].Signal(1, nccl.Signal{}, 0), nccl.ErrSuspended)
	assert.Equal(t, puts, calls("ncclPutSignal"), "the put reached the library")
	assert.Equal(t, signals, calls("ncclSignal"), "the signal reached the library")
	eachBackend(t, c, func(_ int, b *nccl.Backend) error { return b.Resume(ctx) })
	require.NoError(t, bs[0].Signal(1, nccl.Signal{}, 0))
	require.NoError(t, bs[0].Close())
	require.ErrorIs(t, bs[0].PutSignal(mem[0]+4096, 8, 1, inbox[0], 0, nccl.Signal{}, 0), comm.ErrClosed)
	require.ErrorIs(t, bs[0].Signal(1, nccl.Signal{}, 0), comm.ErrClosed)
}
