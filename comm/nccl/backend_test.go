package nccl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// bf16 is the element type of most tests' backends.
var bf16 = WithElementType(comm.BFloat16)

var quiet = WithLogger(slog.New(slog.DiscardHandler))

// TestNCCLInitPollsUntilReady checks the non-blocking init: ncclCommInitRankConfig with
// blocking = 0, then ncclCommGetAsyncError until it leaves ncclInProgress.
func TestNCCLInitPollsUntilReady(t *testing.T) {
	f := fakegpu.New()
	f.InitPolls.Store(5)
	b := newFakeNCCL(t, f, 1, 2, quiet)
	assert.Equal(t, []string{"CommInitRank(2,1,false)"}, f.Named("CommInitRank"))
	assert.GreaterOrEqual(t, len(f.Named("CommGetAsyncError")), 6)
	assert.True(t, b.IsHealthy())
	assert.Equal(t, 1, b.Rank())
	assert.Equal(t, 2, b.WorldSize())
}

// slowInitPoll is the fake whose first CommGetAsyncError answers only after delay, as
// a thread that was descheduled while it asked: the init it reports on completed.
type slowInitPoll struct {
	*fakegpu.Driver
	delay time.Duration
	once  sync.Once
}

func (f *slowInitPoll) CommGetAsyncError(c gpulib.Comm) (gpulib.Result, error) {
	f.once.Do(func() { time.Sleep(f.delay) })
	return f.Driver.CommGetAsyncError(c)
}

// An init that completed within the operation timeout is not a timeout because the
// poll that says so returned after it.
func TestNCCLInitThatCompletedIsNotATimeout(t *testing.T) {
	f := &slowInitPoll{Driver: fakegpu.New(), delay: 50 * time.Millisecond}
	b, err := newNCCL(context.Background(), f, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet, WithTimeout(10 * time.Millisecond)}))
	require.NoError(t, err, "the init completed; only the answer came after the timeout")
	assert.True(t, b.IsHealthy())
	assert.Empty(t, f.Named("CommAbort"))
	require.NoError(t, b.Close())
}

// TestNCCLInitGivesUpAndAborts checks that an init that never completes ends with the
// context's error and an abort, and one that reports an error ends with that error.
func TestNCCLInitGivesUpAndAborts(t *testing.T) {
	t.Run("context deadline", func(t *testing.T) {
		f := fakegpu.New()
		f.InitPolls.Store(1 << 30)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := newNCCL(ctx, f, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet}))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "init on rank 0")
		assert.Len(t, f.Named("CommAbort"), 1)
	})
	t.Run("remote error", func(t *testing.T) {
		f := fakegpu.New()
		f.AsyncErr.Store(int32(gpulib.RemoteError))
		_, err := newNCCL(context.Background(), f, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet}))
		var se *gpulib.Error
		require.ErrorAs(t, err, &se)
		assert.Equal(t, gpulib.RemoteError, se.Code)
		assert.Len(t, f.Named("CommAbort"), 1)
	})
	t.Run("bad rank", func(t *testing.T) {
		f := fakegpu.New()
		_, err := newNCCL(context.Background(), f, comm.UniqueID{}, 2, 2, newConfig([]Option{bf16}))
		require.ErrorIs(t, err, comm.ErrInvalidRank)
		assert.Empty(t, f.Named("CommInitRank"))
	})
}

// TestNCCLBackendCalls checks what each Backend operation asks of NCCL: counts in
// elements of the element type for reductions and in bytes otherwise, the stream it
// uses, and whether the host waits (StreamQuery) afterwards.
func TestNCCLBackendCalls(t *testing.T) {
	tests := []struct {
		name  string
		call  func(b *Backend) error
		want  []string
		waits bool
	}{
		{"all-reduce bf16", func(b *Backend) error { return b.AllReduce(p, 4096) },
			[]string{"AllReduce(2048,9,0,7)"}, true},
		{"reduce-scatter uses the element type", func(b *Backend) error { return b.ReduceScatter(p, p+8192, 4096) },
			[]string{"ReduceScatter(2048,9,0,7)"}, true},
		{"all-gather in bytes", func(b *Backend) error { return b.AllGather(p, p+8192, 4096) },
			[]string{"AllGather(4096,1,7)"}, true},
		{"broadcast in bytes", func(b *Backend) error { return b.Broadcast(p, 10, 1) },
			[]string{"Broadcast(10,1,1,7)"}, true},
		{"barrier is a zero-count all-reduce, not waited", func(b *Backend) error { return b.Barrier() },
			[]string{"AllReduce(0,9,0,7)"}, false},
		{"send on the caller's stream", func(b *Backend) error { return b.SendTo(p, 12, 1, 55) },
			[]string{"Send(12,1,1,55)"}, false},
		{"recv on the caller's stream", func(b *Backend) error { return b.RecvFrom(p, 12, 0, 56) },
			[]string{"Recv(12,1,0,56)"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakegpu.New()
			b := newFakeNCCL(t, f, 1, 2, quiet)
			f.Log()
			require.NoError(t, tc.call(b))
			assert.Equal(t, tc.want, f.Named("AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Send", "Recv"))
			assert.Equal(t, tc.waits, len(f.Named("StreamQuery")) > 0)
		})
	}
}

// TestNCCLAllReduceAsyncOrdersWithEvents checks the event sequence of AllReduceAsync and
// that the host does not wait.
func TestNCCLAllReduceAsyncOrdersWithEvents(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	c := b.Communicator()
	f.Log()
	require.NoError(t, b.AllReduceAsync(p, 64, 99))
	want := []string{
		fmt.Sprintf("EventRecord(%d,99)", c.evIn),
		fmt.Sprintf("StreamWaitEvent(7,%d)", c.evIn),
		"AllReduce(32,9,0,7)",
		fmt.Sprintf("EventRecord(%d,7)", c.evOut),
		fmt.Sprintf("StreamWaitEvent(99,%d)", c.evOut),
	}
	assert.Equal(t, want, f.Named("EventRecord", "StreamWaitEvent", "AllReduce"))
	assert.Empty(t, f.Named("StreamQuery", "StreamSynchronize", "EventQuery"))
	assert.Empty(t, f.Named("SetDevice"), "a stream carries its own context")

	f.Log()
	require.NoError(t, b.AllReduceAsync(p, 64, 0))
	assert.Equal(t, []string{"SetDevice", "EventRecord(" + fmt.Sprint(c.evIn) + ",0)"}, f.Named("SetDevice", "EventRecord")[:2],
		"the legacy default stream is the current context's: bind the device first")
}

// TestNCCLFailureMakesUnhealthy checks that a fatal NCCL error is wrapped with what was
// being done, stays reachable with errors.As, and leaves the backend unhealthy so that
// later operations fail fast without reaching NCCL.
func TestNCCLFailureMakesUnhealthy(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 1, 2, quiet)
	cause := errors.New("ncclRemoteError: remote process exited")
	f.Fail("AllReduce", &gpulib.Error{Code: gpulib.RemoteError, Err: cause})
	err := b.AllReduce(p, 4096)
	require.Error(t, err)
	assert.Equal(t, "all-reduce of 4096 bytes on rank 1: communicator unhealthy: ncclRemoteError: remote process exited", err.Error())
	assert.ErrorIs(t, err, cause)
	var se *gpulib.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, gpulib.RemoteError, se.Code)
	assert.False(t, b.IsHealthy())

	f.Log()
	err = b.Broadcast(p, 8, 0)
	assert.ErrorIs(t, err, comm.ErrUnhealthy)
	assert.ErrorIs(t, err, cause)
	assert.Empty(t, f.Named(fakegpu.NcclCalls...))
}

// TestNCCLInvalidArgumentKeepsHealthy checks NCCL's rule that ncclInvalidArgument leaves
// the communicator usable.
func TestNCCLInvalidArgumentKeepsHealthy(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.Fail("AllGather", &gpulib.Error{Code: gpulib.InvalidArgument})
	require.Error(t, b.AllGather(p, p, 8))
	assert.True(t, b.IsHealthy())
}

// TestNCCLAsyncErrorEndsWait checks that a wait ends with the error NCCL reports
// asynchronously (a peer died while the all-reduce ran).
func TestNCCLAsyncErrorEndsWait(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.Hang.Store(true)
	go func() {
		time.Sleep(10 * time.Millisecond)
		f.AsyncErr.Store(int32(gpulib.SystemError))
	}()
	err := b.AllReduce(p, 8)
	var se *gpulib.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, gpulib.SystemError, se.Code)
	assert.False(t, b.IsHealthy())
}

// TestNCCLCompletionTimeout checks the operation timeout: ErrTimeout, then unhealthy.
func TestNCCLCompletionTimeout(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet, WithTimeout(15*time.Millisecond), WithCloseTimeout(15*time.Millisecond))
	f.Hang.Store(true)
	err := b.AllReduce(p, 8)
	require.ErrorIs(t, err, comm.ErrTimeout)
	assert.False(t, b.IsHealthy())
	require.NoError(t, b.Close())
	assert.Len(t, f.Named("CommAbort"), 1, "a failed communicator is aborted, not finalized")
	assert.Empty(t, f.Named("CommFinalize"))
}

// TestNCCLRecvCommandWaitsForTransportErrors checks that RecvCommandU32 waits without
// the operation timeout and ends with the transport error, the context's error, or
// ErrClosed when another goroutine closes the backend.
func TestNCCLRecvCommandWaitsForTransportErrors(t *testing.T) {
	t.Run("transport error", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 1, 2, quiet, WithTimeout(time.Millisecond))
		f.Hang.Store(true)
		go func() {
			time.Sleep(20 * time.Millisecond) // well past the operation timeout
			f.AsyncErr.Store(int32(gpulib.RemoteError))
		}()
		err := b.RecvCommandU32(context.Background(), p, 0)
		var se *gpulib.Error
		require.ErrorAs(t, err, &se)
		assert.Equal(t, gpulib.RemoteError, se.Code)
		assert.Equal(t, []string{"Broadcast(4,1,0,7)"}, f.Named("Broadcast"))
		assert.False(t, b.IsHealthy())
	})
	t.Run("context", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 1, 2, quiet, WithCloseTimeout(5*time.Millisecond))
		f.Hang.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := b.RecvCommandU32(ctx, p, 0)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.True(t, b.IsHealthy(), "the caller giving up is not a transport failure")
	})
	t.Run("close", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 1, 2, quiet, WithCloseTimeout(5*time.Millisecond))
		f.Hang.Store(true)
		done := make(chan error)
		go func() { done <- b.RecvCommandU32(context.Background(), p, 0) }()
		require.Eventually(t, func() bool { return len(f.Named("Broadcast")) == 1 }, time.Minute, time.Millisecond,
			"the receive is enqueued before the close")
		closeErr := b.Close()
		assert.ErrorIs(t, <-done, comm.ErrClosed)
		assert.Error(t, closeErr, "the pending broadcast never completed")
		assert.Len(t, f.Named("CommAbort"), 1)
	})
}

// TestNCCLGroupBatchesAndWaitsAtEnd checks that blocking collectives inside a group only
// enqueue, and the outermost GroupEnd waits for them.
func TestNCCLGroupBatchesAndWaitsAtEnd(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.Log()
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.AllReduce(p, 8))
	require.NoError(t, b.SendTo(p, 8, 1, 0))
	require.NoError(t, b.RecvFrom(p+8, 8, 1, 0))
	assert.Empty(t, f.Named("StreamQuery"), "no wait inside a group")
	require.NoError(t, b.GroupEnd())
	assert.Empty(t, f.Named("StreamQuery"), "the inner GroupEnd launches nothing")
	assert.Empty(t, f.Named("Submit", "GroupStart", "GroupEnd", "AllReduce", "Send", "Recv"),
		"nothing reaches NCCL before the outermost GroupEnd")
	require.NoError(t, b.GroupEnd())
	assert.NotEmpty(t, f.Named("StreamQuery"), "the outermost GroupEnd waits for the all-reduce")
	assert.Equal(t, []string{"Submit(3)", "GroupStart", "AllReduce(4,9,0,7)", "Send(8,1,1,0)", "Recv(8,1,1,0)", "GroupEnd"},
		f.Named("Submit", "GroupStart", "GroupEnd", "AllReduce", "Send", "Recv"),
		"one submit: NCCL's group around every recorded call, in order; the inner levels never reach it")
	assert.ErrorIs(t, b.GroupEnd(), comm.ErrGroupNotOpen)
}

// TestNCCLGroupBelongsToItsGoroutine checks NCCL's per-thread group scope: a group
// opened on one goroutine (locked to its thread) neither captures another goroutine's
// operations nor can be closed from there.
func TestNCCLGroupBelongsToItsGoroutine(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	started := make(chan struct{})
	release := make(chan struct{})
	ended := make(chan error)
	go func() {
		_ = b.GroupStart()
		close(started)
		<-release
		ended <- b.GroupEnd()
	}()
	<-started
	f.Log()
	assert.ErrorIs(t, b.GroupEnd(), comm.ErrGroupNotOpen, "another goroutine's group cannot be closed here")
	require.NoError(t, b.SendTo(p, 8, 1, 0), "this goroutine has no group: the send is not grouped")
	require.NoError(t, b.AllReduce(p, 8), "nor is a blocking all-reduce, which completes at once")
	assert.NotEmpty(t, f.Named("StreamQuery"), "the all-reduce waited outside the other goroutine's group")
	close(release)
	require.NoError(t, <-ended)
}

// TestNCCLRegistration checks RegisterBuffer/DeregisterBuffer over ncclCommRegister.
func TestNCCLRegistration(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	h1, err := b.RegisterBuffer(p, 4096)
	require.NoError(t, err)
	h2, err := b.RegisterBuffer(p+4096, 4096)
	require.NoError(t, err)
	assert.NotEqual(t, h1, h2)
	require.NoError(t, b.DeregisterBuffer(h1))
	assert.Equal(t, []string{"CommRegister(4096)", "CommRegister(4096)", "CommDeregister(2748)"}, f.Named("CommRegister", "CommDeregister"))
	assert.ErrorIs(t, b.DeregisterBuffer(h1), comm.ErrUnknownHandle)

	f.Fail("CommDeregister", &gpulib.Error{Code: gpulib.InvalidArgument})
	require.Error(t, b.DeregisterBuffer(h2))
	f.Fail("CommDeregister", nil)
	require.NoError(t, b.DeregisterBuffer(h2), "a failed deregistration keeps the handle")
}

// TestNCCLSymmetricAllocByVersion checks ncclMemAlloc, the symmetric window from 2.27,
// and ErrUnsupported before 2.19.
func TestNCCLSymmetricAllocByVersion(t *testing.T) {
	tests := []struct {
		version int
		want    []string
		err     error
	}{
		{22907, []string{"MemAllocNCCL(8192)", "CommWindowRegister(8192,1)", "CommWindowDeregister(3567)", "MemFreeNCCL"}, nil},
		{22703, []string{"MemAllocNCCL(8192)", "CommWindowRegister(8192,1)", "CommWindowDeregister(3567)", "MemFreeNCCL"}, nil},
		{22203, []string{"MemAllocNCCL(8192)", "MemFreeNCCL"}, comm.ErrUnsupported}, // the window is unsupported
		{21805, nil, comm.ErrUnsupported},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.version), func(t *testing.T) {
			f := fakegpu.New()
			f.Ver = tc.version
			b := newFakeNCCL(t, f, 0, 2, quiet)
			q, err := b.SymmetricAlloc(8192)
			if tc.want == nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, []string{"MemAllocNCCL(8192)"}, f.Named("MemAllocNCCL", "CommWindowRegister"), "allocation is local")
			h, err := b.RegisterWindow(context.Background(), q, 8192)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
				again, err := b.RegisterWindow(context.Background(), q, 8192)
				require.NoError(t, err)
				require.Equal(t, h, again, "a second registration returns the same window and calls nothing")
			}
			require.NoError(t, b.SymmetricFree(q))
			assert.Equal(t, tc.want, f.Named("MemAllocNCCL", "CommWindowRegister", "CommWindowDeregister", "MemFreeNCCL"))
			assert.ErrorIs(t, b.SymmetricFree(q), comm.ErrUnknownPointer)
		})
	}
}

// TestNCCLCloseTearsDownInOrder checks the graceful teardown: wait, release what is
// still registered, finalize, destroy; nothing aborted.
func TestNCCLCloseTearsDownInOrder(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	_, err := b.RegisterBuffer(p, 64)
	require.NoError(t, err)
	q, err := b.SymmetricAlloc(4096)
	require.NoError(t, err)
	_, err = b.RegisterWindow(context.Background(), q, 4096)
	require.NoError(t, err)
	f.Log()
	require.NoError(t, b.Close())
	got := f.Named("StreamQuery", "CommDeregister", "CommWindowDeregister", "MemFreeNCCL", "CommFinalize", "CommDestroy", "CommAbort", "StreamDestroy")
	assert.Equal(t, []string{"StreamQuery(7)", "CommDeregister(2748)", "CommWindowDeregister(3567)", "MemFreeNCCL", "CommFinalize(101)", "CommDestroy(101)", "StreamDestroy(7)"}, got)
	assert.ErrorIs(t, b.Close(), comm.ErrClosed)
}

// TestNCCLCloseAbortsWhenFinalizeFails checks the fallback to ncclCommAbort.
func TestNCCLCloseAbortsWhenFinalizeFails(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.Fail("CommFinalize", &gpulib.Error{Code: gpulib.InternalError})
	err := b.Close()
	require.ErrorIs(t, err, gpulib.InternalError, "close says that it had to abort, and why")
	assert.Contains(t, err.Error(), "finalize, then aborted")
	assert.Len(t, f.Named("CommAbort"), 1)
	assert.Empty(t, f.Named("CommDestroy"))
}

// TestNCCLReconnect checks AttemptReconnect: unsupported without WithReconnect; with it,
// abort, a new id for the next generation, init, healthy again, and registrations gone.
func TestNCCLReconnect(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	assert.ErrorIs(t, b.AttemptReconnect(context.Background()), comm.ErrUnsupported)

	f = fakegpu.New()
	var gens []int
	b = newFakeNCCL(t, f, 0, 2, quiet, WithReconnect(func(_ context.Context, gen int) (comm.UniqueID, error) {
		gens = append(gens, gen)
		return comm.UniqueID{byte(10 + gen)}, nil
	}))
	h, err := b.RegisterBuffer(p, 64)
	require.NoError(t, err)
	f.AsyncErr.Store(int32(gpulib.RemoteError))
	require.False(t, b.IsHealthy())
	f.AsyncErr.Store(int32(gpulib.Success))
	require.NoError(t, b.AttemptReconnect(context.Background()))
	assert.True(t, b.IsHealthy())
	assert.Equal(t, []int{1}, gens)
	assert.Equal(t, []string{"CommAbort(101)"}, f.Named("CommAbort"))
	require.Len(t, f.Ids, 2)
	assert.Equal(t, byte(11), f.Ids[1][0])
	assert.ErrorIs(t, b.DeregisterBuffer(h), comm.ErrUnknownHandle)
	require.NoError(t, b.AllReduce(p, 8))
}

// TestNCCLCommunicatorTypedCalls checks the typed API's mapping and that it does not
// wait until Sync; Barrier all-reduces one int32 and waits.
func TestNCCLCommunicatorTypedCalls(t *testing.T) {
	f := fakegpu.New()
	c := newFakeNCCL(t, f, 0, 2, quiet).Communicator()
	f.Log()
	require.NoError(t, c.AllReduce(p, 10, comm.Float32, comm.Max))
	require.NoError(t, c.ReduceScatter(p, p+80, 10, comm.Float16, comm.Avg))
	require.NoError(t, c.Send(p, 3, comm.Int64, 1, 77))
	assert.Empty(t, f.Named("StreamQuery"))
	require.NoError(t, c.Sync(context.Background()))
	assert.NotEmpty(t, f.Named("StreamQuery"))
	require.NoError(t, c.Barrier(context.Background()))
	assert.Equal(t, []string{"AllReduce(10,7,2,7)", "ReduceScatter(10,6,4,7)", "Send(3,4,1,7)", "AllReduce(1,2,0,7)"},
		f.Named("AllReduce", "ReduceScatter", "Send"))
	assert.ErrorIs(t, c.AllReduce(p, 1, comm.DType(42), comm.Sum), comm.ErrInvalidType)
	assert.ErrorIs(t, c.AllReduce(p, 1, comm.Float32, comm.ReduceOp(9)), comm.ErrInvalidOp)
}

// TestNCCLSplit checks Split: the child's rank and size come from the driver, a negative
// color joins nothing, and a driver without CommInfo cannot split.
func TestNCCLSplit(t *testing.T) {
	f := fakegpu.New()
	f.SplitRank, f.SplitWorld = 1, 3
	c := newFakeNCCL(t, f, 2, 6, quiet).Communicator()
	child, err := c.Split(context.Background(), 1, 5)
	require.NoError(t, err)
	require.NotNil(t, child)
	assert.Equal(t, 1, child.Rank())
	assert.Equal(t, 3, child.WorldSize())
	require.NoError(t, child.Close())

	none, err := c.Split(context.Background(), -1, 0)
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.Equal(t, []string{"CommSplit(1,5)", "CommSplit(-1,0)"}, f.Named("CommSplit"))

	noop := comm.NewNoOp()
	_, err = noop.Split(context.Background(), 0, 0)
	assert.ErrorIs(t, err, comm.ErrUnsupported)
}

// TestWithDriverBuildsTheBackend checks the option comm/commtest builds its backends
// with: NewNCCL drives the given driver instead of opening the real libraries.
func TestWithDriverBuildsTheBackend(t *testing.T) {
	f := fakegpu.New()
	b, err := New(context.Background(), comm.UniqueID{}, 0, 1, WithElementType(comm.Float32), quiet, ncclcfg.WithDriver(f))
	require.NoError(t, err)
	assert.Equal(t, comm.Float32, b.ElementType())
	assert.NotEmpty(t, f.Named("CommInitRank"), "the backend initialised through the given driver")
	require.NoError(t, b.Close())
}

// TestNCCLShrinkAndRevoke checks the fault-tolerance extension points: Revoke needs NCCL
// 2.28.7 and leaves the communicator unhealthy; Shrink validates its list and builds the
// child from the driver's rank and size.
func TestNCCLShrinkAndRevoke(t *testing.T) {
	f := fakegpu.New()
	f.SplitRank, f.SplitWorld = 1, 3
	c := newFakeNCCL(t, f, 2, 4, quiet).Communicator()

	for _, bad := range [][]int{{4}, {-1}, {1, 1}, {2}} {
		_, err := c.Shrink(context.Background(), bad, false)
		assert.ErrorIs(t, err, comm.ErrInvalidRank, "%v", bad)
	}
	assert.Empty(t, f.Named("CommShrink"))

	require.NoError(t, c.Revoke())
	assert.False(t, c.IsHealthy())
	child, err := c.Shrink(context.Background(), []int{0}, true)
	require.NoError(t, err)
	assert.Equal(t, []string{"CommRevoke", "CommShrink([0],1)"}, f.Named("CommRevoke", "CommShrink"))
	assert.Equal(t, 1, child.Rank())
	assert.Equal(t, 3, child.WorldSize())
	assert.True(t, child.IsHealthy())
	require.NoError(t, child.Close())

	old := fakegpu.New()
	old.Ver = 22703
	c2 := newFakeNCCL(t, old, 0, 2, quiet).Communicator()
	assert.ErrorIs(t, c2.Revoke(), comm.ErrUnsupported)
}

// TestNCCLGroupReportsTheFailingCallAtEnd checks that the call NCCL fails inside a group
// is reported by the outermost GroupEnd (the operation itself only recorded it), naming
// the operation, its rank and peer, with NCCL's result: errors.Is matches it, and a
// fatal result leaves every communicator of the group unhealthy (ErrUnhealthy).
func TestNCCLGroupReportsTheFailingCallAtEnd(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	other := newFakeNCCL(t, f, 0, 2, quiet)
	f.Fail("Recv", &gpulib.Error{Code: gpulib.RemoteError, Detail: "peer 1 hung up"})
	require.NoError(t, b.GroupStart())
	require.NoError(t, other.SendTo(p, 8, 1, 0), "another communicator's send joins the group")
	require.NoError(t, b.RecvFrom(p+8, 8, 1, 0), "the failure comes at GroupEnd")
	require.NoError(t, b.SendTo(p, 16, 1, 0))
	err := b.GroupEnd()
	require.Error(t, err)
	assert.ErrorIs(t, err, nccl.RemoteError)
	assert.ErrorIs(t, err, comm.ErrUnhealthy)
	var outer *comm.OpError
	require.ErrorAs(t, err, &outer)
	assert.Equal(t, core.OpGroupEnd, outer.Op)
	var op *comm.OpError
	require.ErrorAs(t, outer.Err, &op)
	assert.Equal(t, comm.OpError{Op: core.OpRecv, Bytes: 8, Rank: 0, Peer: 1}, comm.OpError{Op: op.Op, Bytes: op.Bytes, Rank: op.Rank, Peer: op.Peer})
	assert.Contains(t, err.Error(), "recv of 8 bytes on rank 0 from rank 1")
	assert.Contains(t, err.Error(), "peer 1 hung up")
	assert.False(t, b.IsHealthy(), "a fatal result inside a group poisons its communicators")
	assert.False(t, other.IsHealthy())
	assert.Equal(t, []string{"Submit(3)", "GroupStart", "Send(8,1,1,0)", "Recv(8,1,1,0)", "Send(16,1,1,0)", "GroupEnd"},
		f.Named("Submit", "GroupStart", "GroupEnd", "Send", "Recv"),
		"one submission of both communicators' calls, in issue order, every call made")
}

// TestNCCLGroupSubmitsNothingForAClosedMember checks that a communicator closed by
// another goroutine while the group holds its operations fails the GroupEnd (its NCCL
// handle has ended) and that nothing of the group reaches NCCL.
func TestNCCLGroupSubmitsNothingForAClosedMember(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 0, 2, quiet)
	other := newFakeNCCL(t, f, 0, 2, quiet)
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(p, 8, 1, 0))
	require.NoError(t, other.RecvFrom(p, 8, 1, 0))
	done := make(chan error)
	go func() { done <- other.Close() }()
	<-done
	f.Log()
	err := b.GroupEnd()
	assert.ErrorIs(t, err, comm.ErrClosed)
	assert.Empty(t, f.Named("Submit", "Send", "Recv"), "nothing is submitted for a closed communicator")
	require.NoError(t, b.SendTo(p, 8, 1, 0), "the goroutine's group is over")
}

// TestGroupedOperationsDoNotAllocate checks that a warm group of 64 recorded
// operations allocates nothing, per operation or per group.
func TestGroupedOperationsDoNotAllocate(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := newStubNCCL(t, stubDriver{})
	group := func() {
		_ = b.GroupStart()
		for i := range 64 {
			if i%2 == 0 {
				_ = b.SendTo(p, 64, 1, 3)
			} else {
				_ = b.RecvFrom(p+64, 64, 1, 3)
			}
		}
		_ = b.GroupEnd()
	}
	group()
	assert.Zero(t, testing.AllocsPerRun(100, group))
}

// TestBackendsNeedAnElementType: a backend created without an
// element type used to sum float32 data as bfloat16, silently. Every constructor of a
// Backend now fails without one, naming the option.
func TestBackendsNeedAnElementType(t *testing.T) {
	_, err := New(context.Background(), comm.UniqueID{}, 0, 1, quiet, ncclcfg.WithDriver(fakegpu.New()))
	require.ErrorIs(t, err, comm.ErrInvalidType)
	assert.Contains(t, err.Error(), "nccl.WithElementType")
	_, err = comm.NewSingle()
	require.ErrorIs(t, err, comm.ErrInvalidType)
	assert.Contains(t, err.Error(), "comm.WithElementType")
	_, err = comm.Validate(comm.Base{Core: &countingCore{rank: 0, world: 2}})
	require.ErrorIs(t, err, comm.ErrInvalidType)
	assert.Contains(t, err.Error(), "comm.WithElementType")
}
