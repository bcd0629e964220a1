package nccl

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/goid"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
)

// stuckFake is the fake driver whose events do not complete while stuck is set (work
// that never finishes on the device).
type stuckFake struct {
	*fakegpu.Driver
	stuck atomic.Bool
}

func (f *stuckFake) EventQuery(gpulib.Event) (bool, error) {
	return !f.stuck.Load(), f.Rec("EventQuery")
}

func newWatched(t *testing.T, opts ...Option) (*Backend, *stuckFake) {
	t.Helper()
	f := &stuckFake{Driver: fakegpu.New()}
	b, err := newNCCL(context.Background(), f, comm.UniqueID{9}, 0, 2, newConfig(append([]Option{bf16, quiet}, opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NotNil(t, b.c.wd)
	return b, f
}

// The watchdog driven by hand with a fake clock (its own goroutine waits an hour per
// round): an operation that never completes is reported after the operation timeout
// and at most one interval later, wherever the rounds fall.
func TestWatchdogReportsAStuckOperationWithinOneIntervalAfterTheTimeout(t *testing.T) {
	const interval, timeout = 100 * time.Millisecond, 10 * time.Second
	for _, phase := range []time.Duration{time.Nanosecond, 37 * time.Millisecond, interval - time.Nanosecond, interval} {
		t.Run(fmt.Sprint("first round after ", phase), func(t *testing.T) {
			b, f := newWatched(t, WithWatchdog(time.Hour), WithTimeout(timeout))
			w := b.c.wd
			t0 := time.Unix(1_000_000, 0)
			w.now = func() time.Time { return t0 }
			f.stuck.Store(true)
			require.NoError(t, b.Communicator().AllReduce(p, 4, comm.Float32, comm.Sum)) // enqueued at t0, not waited for
			var failedAt time.Duration
			for round := phase; round < 2*timeout; round += interval {
				w.check(t0.Add(round))
				if b.c.faultErr() != nil {
					failedAt = round
					break
				}
			}
			require.NotZero(t, failedAt, "never reported")
			assert.Greater(t, failedAt, timeout, "not before the timeout")
			assert.LessOrEqual(t, failedAt, timeout+interval, "within one interval after it")
			assert.False(t, b.IsHealthy())
			err := b.AllReduce(p, 8)
			assert.ErrorIs(t, err, comm.ErrUnhealthy)
			assert.ErrorIs(t, err, comm.ErrTimeout)
			assert.Contains(t, err.Error(), "has not completed (watchdog, timeout 10s)")
			assert.Empty(t, f.Named("CommAbort"), "no abort without WithAbortOnFailure")
		})
	}
}

func TestWatchdogLeavesWorkThatCompletesAlone(t *testing.T) {
	const interval, timeout = 100 * time.Millisecond, time.Second
	b, f := newWatched(t, WithWatchdog(time.Hour), WithTimeout(timeout))
	w := b.c.wd
	t0 := time.Unix(1_000_000, 0)
	now := t0
	w.now = func() time.Time { return now }
	c := b.Communicator()
	f.stuck.Store(true)
	for round := time.Duration(0); round < 5*timeout; round += interval {
		now = t0.Add(round)
		require.NoError(t, c.AllReduce(p, 4, comm.Float32, comm.Sum), "round %v", round) // a busy stream
		if round == timeout-interval {
			f.stuck.Store(false) // the slow first batch finishes just in time
		}
		w.check(now.Add(interval / 2))
		require.NoError(t, b.c.faultErr(), "round %v", round)
	}
	assert.True(t, b.IsHealthy())
	assert.LessOrEqual(t, len(w.marks), 1, "completed marks are retired")
	assert.NotEmpty(t, w.free, "and their events reused")
}

func TestWatchdogReportsAnAsyncError(t *testing.T) {
	leaktest.Check(t)
	b, f := newWatched(t, WithWatchdog(time.Millisecond))
	f.AsyncErr.Store(int32(gpulib.RemoteError))
	require.Eventually(t, func() bool { return b.c.faultErr() != nil }, 10*time.Second, time.Millisecond,
		"the watchdog records the error without anyone calling the backend")
	assert.False(t, b.IsHealthy())
	f.AsyncErr.Store(int32(gpulib.Success))
	assert.False(t, b.IsHealthy(), "unhealthy until a reconnect")
	assert.Contains(t, b.AllReduce(p, 8).Error(), "ncclRemoteError")
	require.NoError(t, b.Close())
}

// With WithAbortOnFailure a wait that nothing else would end (RecvCommandU32 waits as
// long as its context allows) returns once the watchdog finds the work queued ahead of
// it stuck.
func TestWatchdogAbortEndsABlockedWait(t *testing.T) {
	leaktest.Check(t)
	b, f := newWatched(t, WithWatchdog(2*time.Millisecond), WithTimeout(100*time.Millisecond), WithAbortOnFailure())
	f.Hang.Store(true)
	f.stuck.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, b.Communicator().AllReduce(p, 4, comm.Float32, comm.Sum)) // never completes
	err := b.RecvCommandU32(ctx, p, 1)
	require.ErrorIs(t, err, comm.ErrUnhealthy)
	require.NoError(t, ctx.Err(), "ended by the watchdog, not the context")
	assert.Contains(t, err.Error(), "the watchdog is aborting the communicator")
	require.Eventually(t, func() bool { return len(f.Named("CommAbort")) == 1 }, 10*time.Second, time.Millisecond)

	assert.False(t, b.IsHealthy())
	f.Log() // forget the calls so far
	assert.ErrorIs(t, b.AllReduce(p, 8), comm.ErrUnhealthy)
	_, err = b.Shrink(ctx, []int{1})
	assert.ErrorIs(t, err, comm.ErrUnhealthy)
	assert.Contains(t, err.Error(), "the communicator was aborted")
	assert.ErrorIs(t, b.Communicator().Revoke(), comm.ErrUnhealthy)
	assert.Empty(t, f.Named("AllReduce", "CommShrink", "CommRevoke"), "nothing reaches the aborted communicator")
	require.NoError(t, b.Close())
	assert.Empty(t, f.Named("CommAbort"), "close does not abort it again")
}

// A group left open by a goroutine that ended, or a Group never submitted, does not
// keep the watchdog from aborting the failed communicator: only a group being
// submitted holds the abort off (it holds the communicator). The groups' operations
// then fail at their submission, never reaching the aborted communicator.
func TestWatchdogAbortsDespiteGroupsLeftOpen(t *testing.T) {
	b, f := newWatched(t, WithWatchdog(time.Hour), WithAbortOnFailure())
	w := b.c.wd
	done := make(chan uint64)
	go func() { // ends inside its group
		assert.NoError(t, b.GroupStart())
		assert.NoError(t, b.AllReduce(p, 8))
		done <- goid.ID()
	}()
	t.Cleanup(releaseGroupOf(<-done))
	g := NewGroup()
	require.NoError(t, g.Add(func() error { return b.AllReduce(p, 8) })) // never submitted
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.AllReduce(p, 8)) // open on this goroutine
	f.AsyncErr.Store(int32(gpulib.SystemError))
	w.check(time.Now())
	assert.Len(t, f.Named("CommAbort"), 1, "aborted though groups are open")
	assert.ErrorIs(t, b.GroupEnd(), comm.ErrUnhealthy)
	err := g.Submit()
	assert.ErrorIs(t, err, comm.ErrUnhealthy)
	assert.NotContains(t, err.Error(), "group-end on rank 0: group-end", "the operation is named once")
	w.check(time.Now())
	assert.Len(t, f.Named("CommAbort"), 1, "once")
	assert.Empty(t, f.Named("AllReduce"), "nothing reached the aborted communicator")
}

func TestAttemptReconnectAfterTheWatchdogAborted(t *testing.T) {
	gens := 0
	b, f := newWatched(t, WithWatchdog(time.Hour), WithAbortOnFailure(), WithTimeout(time.Second),
		WithReconnect(func(context.Context, int) (comm.UniqueID, error) { gens++; return comm.UniqueID{byte(gens)}, nil }))
	w := b.c.wd
	t0 := time.Unix(1_000_000, 0)
	w.now = func() time.Time { return t0 }
	f.stuck.Store(true)
	require.NoError(t, b.Communicator().AllReduce(p, 4, comm.Float32, comm.Sum))
	w.check(t0)
	w.check(t0.Add(2 * time.Second))
	require.Len(t, f.Named("CommAbort"), 1)

	require.NoError(t, b.AttemptReconnect(context.Background()))
	assert.Len(t, f.Named("CommAbort"), 1, "the aborted communicator is not aborted again")
	assert.True(t, b.IsHealthy())
	f.stuck.Store(false)
	w.check(t0.Add(10 * time.Second))
	assert.True(t, b.IsHealthy(), "the old generation's stuck work is forgotten")
}

func TestCloseStopsTheWatchdogAndReleasesItsEvents(t *testing.T) {
	leaktest.Check(t)
	b, f := newWatched(t, WithWatchdog(time.Millisecond))
	f.SplitRank, f.SplitWorld = 0, 1
	child, err := b.Communicator().Split(context.Background(), 0, 0)
	require.NoError(t, err)
	require.NotNil(t, child.(*Communicator).wd, "split children are watched too")
	for range 20 {
		require.NoError(t, b.Communicator().AllReduce(p, 4, comm.Float32, comm.Sum))
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, child.Close())
	require.NoError(t, b.Close())
	assert.NotEmpty(t, f.Named("EventRecord"))
	assert.Equal(t, len(f.Named("EventCreate")), len(f.Named("EventDestroy")), "every event destroyed")
}

// An idle worker waits in RecvCommandU32 without a deadline, far longer than the
// operation timeout: the watchdog must not count that wait (IsHealthy stays true and
// nothing is aborted), nor the work queued behind it before it completes; once the
// command has arrived, a collective that really hangs is still reported after the
// timeout.
func TestWatchdogLeavesAnIdleWorkerAlone(t *testing.T) {
	const interval, timeout = 100 * time.Millisecond, time.Second
	b, f := newWatched(t, WithWatchdog(time.Hour), WithTimeout(timeout), WithAbortOnFailure())
	w := b.c.wd
	t0 := time.Unix(1_000_000, 0)
	w.now = func() time.Time { return t0 }
	f.stuck.Store(true) // events (the command's and the watchdog's) do not complete
	f.Hang.Store(true)  // nor does the stream: no command arrives
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received := make(chan error)
	go func() { received <- b.RecvCommandU32(ctx, p, 1) }()
	require.Eventually(t, func() bool { return len(f.Named("Broadcast")) == 1 }, 10*time.Second, time.Millisecond)
	for round := interval; round < 5*timeout; round += interval {
		w.check(t0.Add(round))
	}
	assert.NoError(t, b.c.faultErr(), "a deadline-free wait counted against the operation timeout")
	assert.True(t, b.IsHealthy())
	assert.Empty(t, f.Named("CommAbort"), "the idle worker was aborted")

	f.Hang.Store(false) // the command arrives
	f.stuck.Store(false)
	require.NoError(t, <-received)
	t1 := t0.Add(10 * timeout)
	w.now = func() time.Time { return t1 }
	w.check(t1) // sees the command's event complete
	f.stuck.Store(true)
	require.NoError(t, b.Communicator().AllReduce(p, 4, comm.Float32, comm.Sum)) // really hangs
	for round := interval; round < 3*timeout && b.c.faultErr() == nil; round += interval {
		w.check(t1.Add(round))
	}
	require.ErrorIs(t, b.c.faultErr(), comm.ErrTimeout, "a collective that hangs after the command is still reported")
}
