package nccl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/kernels"
)

// The two-rank path against the recording fake driver: which calls it makes, in which
// order, with which arguments, and how it fails. comm/commtest checks its results on
// the simulator.

const addFn comm.Kernel = 0x77

// twoRankNames are the calls the path can make.
var twoRankNames = []string{"MemAlloc", "CommRegister", "GroupStart", "Send", "Recv", "GroupEnd",
	"LaunchKernel", "AllReduce", "StreamQuery", "CommDeregister", "MemFree", "EventRecord", "StreamWaitEvent"}

// newTwoRank returns rank's backend of a 2-rank world on f with the add kernel set,
// and forgets the calls made so far.
func newTwoRank(t *testing.T, f *fakegpu.Driver, rank int, opts ...Option) *Backend {
	t.Helper()
	b := newFakeNCCL(t, f, rank, 2, append([]Option{quiet}, opts...)...)
	require.NoError(t, b.SetAddKernel(addFn))
	f.Log()
	return b
}

// launch is the LaunchKernel record of an add of count elements of size es at dst,
// src on the communication stream of a device with 132 SMs (the fake's).
func launch(t *testing.T, dst, src gpulib.Ptr, count, es int) string {
	t.Helper()
	grid, block, err := kernels.LaunchDims(count, es, 132)
	require.NoError(t, err)
	return fmt.Sprintf("LaunchKernel(%d,%d,%d,7,[%d %d %d])", addFn, grid, block, dst, src, count)
}

// TestTwoRankPathCallSequence checks the exchange: scratch allocated and registered at
// first use only, send and receive of count elements to and from the peer in one group,
// then the add kernel on the communication stream (dst = buffer, src = scratch at the
// buffer's offset modulo 16), then the wait.
func TestTwoRankPathCallSequence(t *testing.T) {
	tests := []struct {
		name  string
		elem  comm.DType
		rank  int
		calls []struct {
			off, bytes int
		}
	}{
		{"bf16 rank 0", comm.BFloat16, 0, []struct{ off, bytes int }{{0, 4096}, {0, 4096}, {6, 64}}},
		{"fp16 rank 1", comm.Float16, 1, []struct{ off, bytes int }{{2, 2}, {14, 4000}}},
		{"fp32 rank 1", comm.Float32, 1, []struct{ off, bytes int }{{4, 4092}, {12, 400}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakegpu.New()
			b := newTwoRank(t, f, tc.rank, WithElementType(tc.elem))
			peer, es, dt := 1-tc.rank, tc.elem.Size(), int32(tc.elem)
			for i, call := range tc.calls {
				ptr := p + comm.DevicePtr(call.off)
				require.NoError(t, b.AllReduce(ptr, call.bytes))
				count := call.bytes / es
				recv := b.two.cur.p + gpulib.Ptr(call.off%16)
				var want []string
				if i == 0 {
					want = append(want, "MemAlloc(4096)", "CommRegister(4096)")
				}
				want = append(want, "GroupStart",
					fmt.Sprintf("Send(%d,%d,%d,7)", count, dt, peer),
					fmt.Sprintf("Recv(%d,%d,%d,7)", count, dt, peer),
					"GroupEnd", launch(t, gpulib.Ptr(ptr), recv, count, es), "StreamQuery(7)")
				assert.Equal(t, want, f.Named(twoRankNames...), "call %d", i)
				f.Log()
			}
		})
	}
}

// TestTwoRankPathAsyncOrdersWithEvents checks AllReduceAsync on the path: the exchange
// and the add sit between the two events, and the host does not wait.
func TestTwoRankPathAsyncOrdersWithEvents(t *testing.T) {
	f := fakegpu.New()
	b := newTwoRank(t, f, 0)
	c := b.Communicator()
	require.NoError(t, b.AllReduceAsync(p, 64, 99))
	want := []string{
		fmt.Sprintf("EventRecord(%d,99)", c.evIn),
		fmt.Sprintf("StreamWaitEvent(7,%d)", c.evIn),
		"MemAlloc(4096)", "CommRegister(4096)",
		"GroupStart", "Send(32,9,1,7)", "Recv(32,9,1,7)", "GroupEnd",
		launch(t, gpulib.Ptr(p), b.two.cur.p, 32, 2),
		fmt.Sprintf("EventRecord(%d,7)", c.evOut),
		fmt.Sprintf("StreamWaitEvent(99,%d)", c.evOut),
	}
	assert.Equal(t, want, f.Named(twoRankNames...))
	assert.Empty(t, f.Named("StreamSynchronize", "EventQuery"))
}

// TestTwoRankPathScratchGrowsWithoutWaiting checks growth: the scratch buffer grows to
// powers of two only when a call needs more; a buffer replaced while the stream is busy
// is kept (no wait, no free under pending work) and freed at a later growth when the
// stream is idle; Close deregisters and frees the last one.
func TestTwoRankPathScratchGrowsWithoutWaiting(t *testing.T) {
	f := fakegpu.New()
	b := newTwoRank(t, f, 0, WithTwoRankThreshold(1<<16))
	f.Hang.Store(true) // the communication stream never reports idle
	for _, bytes := range []int{64, 4096, 4098, 8192, 1 << 16} {
		require.NoError(t, b.AllReduceAsync(p, bytes, 3))
	}
	assert.Equal(t, []string{"MemAlloc(4096)", "MemAlloc(8192)", "MemAlloc(65536)"}, f.Named("MemAlloc"),
		"4098 bytes grow 4096 to 8192, 8192 fit")
	assert.Len(t, f.Named("CommRegister"), 3)
	assert.Empty(t, f.Named("MemFree", "CommDeregister"), "nothing is freed while the stream is busy")
	assert.Len(t, b.two.retired, 2)

	f.Hang.Store(false)
	f.Log()
	require.NoError(t, b.AllReduce(p+8, 1<<16))
	assert.Equal(t, []string{"MemAlloc(65552)"}, f.Named("MemAlloc"),
		"offset 8 needs 65544 bytes: capped at the threshold plus 16 bytes of alignment slack")
	assert.Len(t, f.Named("CommDeregister"), 3, "the stream is idle: every replaced buffer is freed")
	assert.Len(t, f.Named("MemFree"), 3)
	assert.Empty(t, b.two.retired)

	f.Log()
	require.NoError(t, b.Close())
	assert.Len(t, f.Named("CommDeregister"), 1, "the current scratch buffer")
	assert.Len(t, f.Named("MemFree"), 2, "the scratch buffer and the backend's own")
}

// TestTwoRankPathFreesReplacedScratchWhenIdle checks that a growth frees the buffer it
// replaces at once when the communication stream is idle.
func TestTwoRankPathFreesReplacedScratchWhenIdle(t *testing.T) {
	f := fakegpu.New()
	b := newTwoRank(t, f, 1)
	require.NoError(t, b.AllReduce(p, 64))
	f.Log()
	require.NoError(t, b.AllReduce(p, 8192))
	assert.Equal(t, []string{"MemAlloc(8192)", "StreamQuery(7)", "CommDeregister(2748)", "MemFree", "CommRegister(8192)"},
		f.Named("MemAlloc", "MemFree", "CommRegister", "CommDeregister", "StreamQuery")[:5])
	assert.Empty(t, b.two.retired)
}

// TestTwoRankPathReregistersAfterReconnect checks that a new communicator generation
// registers the scratch buffer again (the old registration ended with the aborted
// communicator and is not deregistered).
func TestTwoRankPathReregistersAfterReconnect(t *testing.T) {
	f := fakegpu.New()
	b := newTwoRank(t, f, 0, WithReconnect(func(_ context.Context, gen int) (comm.UniqueID, error) {
		return comm.UniqueID{byte(gen)}, nil
	}))
	require.NoError(t, b.AllReduce(p, 64))
	require.NoError(t, b.AttemptReconnect(context.Background()))
	require.NoError(t, b.AllReduce(p, 64))
	assert.Equal(t, []string{"MemAlloc(4096)", "CommRegister(4096)", "CommRegister(4096)"},
		f.Named("MemAlloc", "CommRegister", "CommDeregister"))
	f.Log()
	require.NoError(t, b.Close())
	assert.Len(t, f.Named("CommDeregister"), 1)
}

// TestTwoRankPathWithoutRegistration checks NCCL 2.18, which has no ncclCommRegister:
// the scratch buffer is used unregistered.
func TestTwoRankPathWithoutRegistration(t *testing.T) {
	f := fakegpu.New()
	f.Ver = 21803
	b := newTwoRank(t, f, 0)
	require.NoError(t, b.AllReduce(p, 64))
	assert.Equal(t, []string{"MemAlloc(4096)", "GroupStart"}, f.Named("MemAlloc", "CommRegister", "GroupStart"))
	require.NoError(t, b.Close())
	assert.Empty(t, f.Named("CommDeregister"))
}

// TestTwoRankPathNotTaken checks the all-reduces that call ncclAllReduce although the
// backend has an add kernel.
func TestTwoRankPathNotTaken(t *testing.T) {
	tests := []struct {
		name  string
		world int
		opts  []Option
		call  func(b *Backend) error
	}{
		{"zero bytes", 2, nil, func(b *Backend) error { return b.AllReduce(0, 0) }},
		{"above the threshold", 2, []Option{WithTwoRankThreshold(64)}, func(b *Backend) error { return b.AllReduce(p, 66) }},
		{"threshold 0 disables it", 2, []Option{WithTwoRankThreshold(0)}, func(b *Backend) error { return b.AllReduce(p, 2) }},
		{"three ranks", 3, nil, func(b *Backend) error { return b.AllReduce(p, 64) }},
		{"int32 has no add kernel", 2, []Option{WithElementType(comm.Int32)}, func(b *Backend) error { return b.AllReduce(p, 64) }},
		{"float8 has no add kernel", 2, []Option{WithElementType(comm.Float8E4M3)}, func(b *Backend) error { return b.AllReduceAsync(p, 64, 3) }},
		{"inside a group", 2, nil, func(b *Backend) error {
			if err := b.GroupStart(); err != nil {
				return err
			}
			if err := b.AllReduce(p, 64); err != nil {
				return err
			}
			return b.GroupEnd()
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fakegpu.New()
			b := newFakeNCCL(t, f, 0, tc.world, append([]Option{quiet}, tc.opts...)...)
			require.NoError(t, b.SetAddKernel(addFn))
			f.Log()
			require.NoError(t, tc.call(b))
			assert.Len(t, f.Named("AllReduce"), 1)
			assert.Empty(t, f.Named("Send", "Recv", "LaunchKernel", "MemAlloc", "CommRegister"))
		})
	}
}

// TestTwoRankPathFailures checks that every failing step is reported with what was
// being done, keeps NCCL's group balanced, and leaves the communicator unhealthy only
// after a fatal NCCL error.
func TestTwoRankPathFailures(t *testing.T) {
	remote := &gpulib.Error{Code: gpulib.RemoteError, Err: errors.New("ncclRemoteError: peer gone")}
	invalid := &gpulib.Error{Code: gpulib.InvalidArgument}
	cuda := errors.New("CUDA_ERROR_OUT_OF_MEMORY")
	tests := []struct {
		fail      string
		err       error
		msg       string
		groupEnds int // GroupEnd calls made
		healthy   bool
	}{
		{"MemAlloc", cuda, "all-reduce of 64 bytes on rank 0: allocate 4096 bytes of two-rank scratch: CUDA_ERROR_OUT_OF_MEMORY", 0, true},
		{"CommRegister", remote, "all-reduce of 64 bytes on rank 0: communicator unhealthy: register 4096 bytes of two-rank scratch: ncclRemoteError: peer gone", 0, false},
		{"GroupStart", invalid, "all-reduce of 64 bytes on rank 0: two-rank exchange: group start: ncclInvalidArgument", 0, true},
		{"Send", remote, "all-reduce of 64 bytes on rank 0: communicator unhealthy: two-rank exchange: send to rank 1: ncclRemoteError: peer gone", 1, false},
		{"Recv", invalid, "all-reduce of 64 bytes on rank 0: two-rank exchange: receive from rank 1: ncclInvalidArgument", 1, true},
		{"GroupEnd", remote, "all-reduce of 64 bytes on rank 0: communicator unhealthy: two-rank exchange: group end: ncclRemoteError: peer gone", 1, false},
		{"LaunchKernel", cuda, "all-reduce of 64 bytes on rank 0: two-rank add kernel: CUDA_ERROR_OUT_OF_MEMORY", 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.fail, func(t *testing.T) {
			f := fakegpu.New()
			b := newTwoRank(t, f, 0, WithCloseTimeout(0))
			f.Fail(tc.fail, tc.err)
			err := b.AllReduce(p, 64)
			require.Error(t, err)
			assert.Equal(t, tc.msg, err.Error())
			assert.ErrorIs(t, err, tc.err)
			var oe *comm.OpError
			assert.ErrorAs(t, err, &oe)
			assert.Len(t, f.Named("GroupEnd"), tc.groupEnds)
			assert.Equal(t, tc.healthy, b.IsHealthy())
			f.Fail(tc.fail, nil)
		})
	}
}

// TestTwoRankPathRejectsMisalignedPointers checks that a pointer not aligned to the
// element size, which the add kernel cannot load, fails in the shared guard before any
// library call (so no rank is left alone in the exchange).
func TestTwoRankPathRejectsMisalignedPointers(t *testing.T) {
	for _, tc := range []struct {
		elem comm.DType
		off  comm.DevicePtr
	}{{comm.BFloat16, 1}, {comm.Float16, 3}, {comm.Float32, 2}, {comm.Float32, 6}} {
		t.Run(fmt.Sprintf("%v+%d", tc.elem, tc.off), func(t *testing.T) {
			f := fakegpu.New()
			b := newTwoRank(t, f, 1, WithElementType(tc.elem))
			for name, call := range map[string]func() error{
				"all-reduce":       func() error { return b.AllReduce(p+tc.off, 64) },
				"all-reduce-async": func() error { return b.AllReduceAsync(p+tc.off, 64, 3) },
			} {
				err := call()
				require.ErrorIs(t, err, comm.ErrMisaligned, name)
				var ae *comm.ArgError
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, "ptr", ae.Arg)
				assert.Contains(t, err.Error(), fmt.Sprintf("misaligned pointer: not a multiple of %d (%v)", tc.elem.Size(), tc.elem))
			}
			assert.Empty(t, f.Named(fakegpu.NcclCalls...))
			assert.True(t, b.IsHealthy())
		})
	}
}

// TestSetAddKernel checks SetAddKernel: it reads the SM count once, reports a failure
// to read it (and then keeps ncclAllReduce), validates the handle, and ignores the
// kernel for element types without one.
func TestSetAddKernel(t *testing.T) {
	t.Run("reads the SM count once", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 0, 2, quiet)
		require.NoError(t, b.SetAddKernel(addFn))
		require.NoError(t, b.SetAddKernel(addFn+1))
		assert.Len(t, f.Named("MultiprocessorCount"), 1)
		require.NoError(t, b.AllReduce(p, 64))
		assert.Contains(t, f.Named("LaunchKernel")[0], fmt.Sprintf("LaunchKernel(%d,", addFn+1), "the last kernel set is used")
	})
	t.Run("SM count failure", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 1, 2, quiet)
		f.Fail("MultiprocessorCount", errors.New("CUDA_ERROR_INVALID_DEVICE"))
		err := b.SetAddKernel(addFn)
		assert.EqualError(t, err, "set-add-kernel on rank 1: CUDA_ERROR_INVALID_DEVICE")
		require.NoError(t, b.AllReduce(p, 64))
		assert.Len(t, f.Named("AllReduce"), 1, "without a kernel the all-reduce is ncclAllReduce")
	})
	t.Run("null kernel", func(t *testing.T) {
		b := newFakeNCCL(t, fakegpu.New(), 0, 2, quiet)
		assert.ErrorIs(t, b.SetAddKernel(0), comm.ErrNullPointer)
	})
	t.Run("type without add kernel", func(t *testing.T) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 0, 2, quiet, WithElementType(comm.Float64))
		require.NoError(t, b.SetAddKernel(addFn))
		assert.Empty(t, f.Named("MultiprocessorCount"))
	})
	t.Run("after close", func(t *testing.T) {
		b := newFakeNCCL(t, fakegpu.New(), 0, 2, quiet)
		require.NoError(t, b.Close())
		assert.ErrorIs(t, b.SetAddKernel(addFn), comm.ErrClosed)
	})
}

// TestWithTwoRankThresholdRejectsNegative checks the option's validation, before any
// library call.
func TestWithTwoRankThresholdRejectsNegative(t *testing.T) {
	f := fakegpu.New()
	_, err := newNCCL(context.Background(), f, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, WithTwoRankThreshold(-1)}))
	require.ErrorIs(t, err, comm.ErrInvalidSize)
	assert.EqualError(t, err, "init: two-rank threshold -1: invalid size: negative (rank 0); 0 disables the two-rank path")
	assert.Empty(t, f.Log())
	_, err = New(context.Background(), comm.UniqueID{}, 0, 2, bf16, WithTwoRankThreshold(-5))
	require.ErrorIs(t, err, comm.ErrInvalidSize)
}

// TestTwoRankPathAllocatesNothing checks the path's steady state: after the first call
// has made the scratch buffer, AllReduce and AllReduceAsync allocate nothing.
func TestTwoRankPathAllocatesNothing(t *testing.T) {
	b := newStubNCCL(t, stubDriver{})
	require.NoError(t, b.SetAddKernel(addFn))
	calls := map[string]func(){
		"AllReduce":           func() { _ = b.AllReduce(p, 4096) },
		"AllReduce unaligned": func() { _ = b.AllReduce(p+6, 4000) },
		"AllReduceAsync":      func() { _ = b.AllReduceAsync(p, 4096, 3) },
	}
	for name, call := range calls {
		call()
		require.NotZero(t, b.two.cur.p, "%s: the path made its scratch buffer", name)
		assert.Zero(t, testing.AllocsPerRun(200, call), name)
	}
}

// TestPow2 checks the scratch sizing helper at its edges.
func TestPow2(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{0, 1}, {1, 1}, {2, 2}, {3, 4}, {4096, 4096}, {4097, 8192},
		{1 << 62, 1 << 62}, {1<<62 + 1, 1<<62 + 1}, {math.MaxInt, math.MaxInt},
	} {
		assert.Equal(t, tc.want, pow2(tc.n), "pow2(%d)", tc.n)
	}
}

// BenchmarkTwoRankOverhead measures comm's own cost per blocking all-reduce of 4096
// bytes on the two-rank path against the ncclAllReduce path (the baseline), over a
// driver that does nothing, alternating the two in the same run.
func BenchmarkTwoRankOverhead(b *testing.B) {
	backend := func(threshold int) *Backend {
		nb, err := newNCCL(context.Background(), stubDriver{}, comm.UniqueID{}, 0, 2,
			newConfig([]Option{bf16, quiet, WithTwoRankThreshold(threshold)}))
		require.NoError(b, err)
		b.Cleanup(func() { _ = nb.Close() })
		require.NoError(b, nb.SetAddKernel(addFn))
		return nb
	}
	two, base := backend(DefaultTwoRankThreshold), backend(0)
	path := func() { _ = two.AllReduce(p, 4096) }
	nccl := func() { _ = base.AllReduce(p, 4096) }
	path()
	pa, na := testing.AllocsPerRun(100, path), testing.AllocsPerRun(100, nccl)
	b.ResetTimer()
	tp, tn := pairbench.Alternate(b.N, 256, pairbench.Repeat(path), pairbench.Repeat(nccl))
	n := float64(b.N)
	b.ReportMetric(float64(tp.Nanoseconds())/n, "two-rank-ns/op")
	b.ReportMetric(float64(tn.Nanoseconds())/n, "nccl-all-reduce-ns/op")
	b.ReportMetric(float64(tp)/float64(tn), "two-rank/nccl-all-reduce")
	b.ReportMetric(pa, "two-rank-allocs/op")
	b.ReportMetric(na, "nccl-all-reduce-allocs/op")
}
