//go:build cgo

package rawdriver

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
)

// onOwnThread runs f on a goroutine locked to a thread that ends with it: whatever
// group state the library leaves on the thread goes with it.
func onOwnThread(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		f()
	}()
	<-done
}

// The real libnccl's ncclGroupSimulateEnd, through Batch.Simulate: NCCL's own error for
// a group of calls on an invalid (null) communicator names the first call, the group is
// ended (a further group end is NCCL's "not in a group call"), and the calls stay
// recorded, so Submit makes them again. An empty group has no estimate.
func TestSimulateReachesTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	onOwnThread(func() {
		b := gpulib.NewBatch(d)
		sim, ok := b.(gpulib.Simulator)
		require.True(t, ok, "the raw batch simulates")
		require.NoError(t, b.Send(0x1000, 8, gpulib.Uint8, 1, 0, 0))
		require.NoError(t, b.Recv(0x2000, 8, gpulib.Uint8, 1, 0, 0))
		failed, usec, err := sim.Simulate()
		assert.Equal(t, 0, failed, "the send on the null communicator is rejected first")
		assert.Negative(t, usec, "no estimate")
		var se *gpulib.Error
		require.ErrorAs(t, err, &se)
		assert.Equal(t, gpulib.InvalidArgument, se.Code)
		assert.NotEmpty(t, se.Detail, "NCCL's own text")

		var ge *gpulib.Error
		require.ErrorAs(t, d.GroupEnd(), &ge, "ncclGroupSimulateEnd ended the group")
		assert.Equal(t, gpulib.InvalidUsage, ge.Code)

		assert.Equal(t, 2, b.(*Batch).Len(), "the calls are kept")
		failed, err = b.Submit()
		assert.Equal(t, 0, failed, "submit makes the kept calls")
		require.ErrorAs(t, err, &se)
		assert.Equal(t, gpulib.InvalidArgument, se.Code)

		b.Reset()
		failed, usec, err = sim.Simulate()
		require.NoError(t, err, "an empty group")
		assert.Zero(t, failed)
		assert.Negative(t, usec, "NCCL planned nothing: the estimate stays undefined")

		_, err = d.GroupSimulateEnd()
		require.ErrorAs(t, err, &ge, "without a group")
		assert.Equal(t, gpulib.InvalidUsage, ge.Code)
	})
}
