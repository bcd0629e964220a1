package sim

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

func TestKilledRankNeverContributesAndItsDriverFails(t *testing.T) {
	r := newRig(t, 3)
	bufs := r.alloc(t, 4, nil)
	require.NoError(t, r.w.Kill(2))
	for i := range 2 {
		require.NoError(t, r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i]))
	}
	assert.True(t, never(30*time.Millisecond, func() bool {
		done, _ := r.d[0].StreamQuery(r.s[0])
		return done
	}), "survivors' all-reduce waits for the dead rank forever")
	res, err := r.d[0].CommGetAsyncError(r.c[0])
	require.NoError(t, err)
	assert.Equal(t, gpulib.Success, res, "NCCL does not notice a dead peer by itself")

	_, err = r.d[2].MemAlloc(8)
	assert.Equal(t, ErrorDeviceUnavailable, cudaCode(err))
	assert.Equal(t, gpulib.UnhandledCudaError, ncclCode(r.d[2].AllReduce(bufs[2], bufs[2], 1, gpulib.Int32, gpulib.Sum, r.c[2], r.s[2])))
	for i := range 2 {
		require.NoError(t, r.d[i].CommAbort(r.c[i]))
		require.NoError(t, r.d[i].StreamSynchronize(r.s[i]), "abort ends the survivors' operation")
	}
}

func TestInjectedAsyncErrorIsReportedAndRefusesWork(t *testing.T) {
	r := newRig(t, 2)
	require.NoError(t, r.w.InjectError(1, gpulib.RemoteError))
	res, err := r.d[1].CommGetAsyncError(r.c[1])
	require.NoError(t, err)
	assert.Equal(t, gpulib.RemoteError, res)
	res, _ = r.d[0].CommGetAsyncError(r.c[0])
	assert.Equal(t, gpulib.Success, res, "only the injected rank")
	p, _ := r.w.Alloc(1, 4)
	assert.Equal(t, gpulib.RemoteError, ncclCode(r.d[1].AllReduce(p, p, 1, gpulib.Int32, gpulib.Sum, r.c[1], r.s[1])))
	assert.Error(t, r.w.InjectError(1, gpulib.Success))
	assert.Error(t, r.w.InjectError(5, gpulib.RemoteError))
}

func TestHungOperationCompletesOnlyAfterAbort(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{1}) })
	require.NoError(t, r.w.Hang(0, 1))
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
	})
	assert.True(t, never(30*time.Millisecond, func() bool {
		d0, _ := r.d[0].StreamQuery(r.s[0])
		d1, _ := r.d[1].StreamQuery(r.s[1])
		return d0 || d1
	}), "neither the hung rank nor its peer completes")
	r.each(t, func(i int) error { return r.d[i].CommAbort(r.c[i]) })
	r.sync(t)
	assert.Equal(t, int32s([]int32{1}), r.read(t, 0, bufs[0], 4), "an aborted operation writes nothing")
}

func TestDelaySlowsARank(t *testing.T) {
	r := newRig(t, 2)
	bufs := r.alloc(t, 4, nil)
	require.NoError(t, r.w.Delay(1, 40*time.Millisecond))
	start := time.Now()
	r.each(t, func(i int) error {
		return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, r.c[i], r.s[i])
	})
	r.sync(t)
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond)
	assert.Error(t, r.w.Delay(0, -time.Second))
}

func TestFailCallInjectsAnErrorForTheNextCalls(t *testing.T) {
	w := newWorld(t, 1)
	d := w.drivers[0]
	oom := &CUDAError{Code: ErrorOutOfMemory, Call: "cuMemAlloc_v2"}
	require.NoError(t, w.FailCall(0, "cuMemAlloc_v2", oom, 2))
	for range 2 {
		_, err := d.MemAlloc(8)
		assert.Equal(t, ErrorOutOfMemory, cudaCode(err))
	}
	_, err := d.MemAlloc(8)
	assert.NoError(t, err, "only the next two calls fail")

	require.NoError(t, w.FailCall(0, "ncclGetUniqueId", nil, 1))
	_, err = d.GetUniqueID()
	assert.True(t, errors.Is(err, ErrInjected))
	assert.Equal(t, gpulib.SystemError, ncclCode(err))

	assert.Error(t, w.FailCall(0, "cuMemAlloc", nil, 1), "unknown function name")
	assert.Error(t, w.FailCall(0, "cuMemAlloc_v2", nil, 0))
	assert.Error(t, w.FailCall(1, "cuMemAlloc_v2", nil, 1))
}

func TestReviveBringsBackAnEmptyDeviceThatCanJoinANewCommunicator(t *testing.T) {
	r := newRig(t, 2)
	p, _ := r.w.Alloc(1, 8)
	require.Error(t, r.w.Revive(1), "an alive device cannot be revived")
	require.NoError(t, r.w.Kill(1))
	require.NoError(t, r.w.Revive(1))
	_, err := r.w.Read(1, p, 8)
	assert.ErrorContains(t, err, "freed memory", "the old memory is gone")
	u, err := r.w.Usage(1)
	require.NoError(t, err)
	assert.Equal(t, Usage{}, u)
	_, err = r.d[1].StreamQuery(r.s[1])
	assert.Equal(t, ErrorInvalidHandle, cudaCode(err), "the old stream is gone")

	// Both ranks build a new communicator; rank 0 aborts its old one first.
	require.NoError(t, r.d[0].CommAbort(r.c[0]))
	id, _ := r.d[0].GetUniqueID()
	c := make([]gpulib.Comm, 2)
	r.each(t, func(i int) error {
		var err error
		c[i], err = r.d[i].CommInitRank(2, id, i, gpulib.Config{Blocking: true})
		return err
	})
	bufs := r.alloc(t, 4, func(i int) []byte { return int32s([]int32{int32(i + 5)}) })
	r.each(t, func(i int) error { return r.d[i].AllReduce(bufs[i], bufs[i], 1, gpulib.Int32, gpulib.Sum, c[i], 0) })
	r.each(t, func(i int) error { return r.d[i].StreamSynchronize(0) })
	assert.Equal(t, int32s([]int32{11}), r.read(t, 1, bufs[1], 4))
}

// Work queued on a device before Kill belongs to the dead process: it must never run on
// the revived device, neither touching its memory nor leaving a sticky fault there.
func TestReviveRetiresWorkQueuedBeforeKill(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block func(r *rig) // makes rank 1's next all-reduce wait forever
	}{
		{"waiting for a peer", func(*rig) {}},
		{"hung", func(r *rig) { require.NoError(t, r.w.Hang(1, 1)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 { // the stale work raced Revive: repeat to catch it
				r := newRig(t, 2)
				var ran atomic.Bool
				name := "mark-" + t.Name()
				require.NoError(t, r.w.RegisterKernel(name, Kernel{Run: func(Memory, []uint64) error {
					ran.Store(true)
					return nil
				}}))
				mark, err := r.w.LoadKernel(1, name)
				require.NoError(t, err)
				old := r.alloc(t, 8, nil)[1]

				tc.block(r)
				require.NoError(t, r.d[1].AllReduce(old, old, 1, gpulib.Int32, gpulib.Sum, r.c[1], r.s[1]))
				require.NoError(t, r.w.CopyAsync(1, old+4, old, 4, r.s[1]))
				require.NoError(t, r.d[1].LaunchKernel(mark, 1, 1, r.s[1], gpulib.KernelArgs{}))
				require.NoError(t, r.w.Kill(1))
				require.NoError(t, r.w.Revive(1))

				p, err := r.d[1].MemAlloc(8)
				require.NoError(t, err, "the revived device works")
				s, err := r.d[1].StreamCreate()
				require.NoError(t, err)
				require.NoError(t, r.d[1].MemcpyDtoDAsync(p+4, p, 4, s))
				require.NoError(t, r.d[1].StreamSynchronize(s), "no sticky fault from stale work")
				require.NoError(t, r.w.Synchronize(1))
				require.NoError(t, r.w.Close())
				require.NoError(t, r.w.Synchronize(1), "stale work ran after Revive and faulted")
				assert.False(t, ran.Load(), "work queued before Kill ran on the revived device")
			}
		})
	}
}
