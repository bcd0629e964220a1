//go:build cgo

package rawdriver

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestElasticCallsReachTheRealLibrary checks, without a GPU, that each elastic and
// memory call reaches libnccl 2.29.7 and that the library's own argument checks come
// back as its result: a null communicator, and ncclCommGrow's rules for newcomers.
func TestElasticCallsReachTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	id, err := UniqueID()
	require.NoError(t, err)
	calls := map[string]func() error{
		"CommGetUniqueID": func() error { _, err := d.CommGetUniqueID(0); return err },
		"CommSuspend":     func() error { return d.CommSuspend(0, gpulib.SuspendMem) },
		"CommResume":      func() error { return d.CommResume(0) },
		"CommMemStats":    func() error { _, err := d.CommMemStats(0, gpulib.StatMemTotal); return err },
		"CommGrow/no ranks": func() error {
			_, err := d.CommGrow(0, 0, &id, 0, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer without id": func() error {
			_, err := d.CommGrow(0, 2, nil, 1, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer without rank": func() error {
			_, err := d.CommGrow(0, 2, &id, -1, gpulib.Config{Blocking: true})
			return err
		},
		"CommGrow/newcomer past the size": func() error {
			_, err := d.CommGrow(0, 2, &id, 2, gpulib.Config{Blocking: true})
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var se *gpulib.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, gpulib.InvalidArgument, se.Code)
			assert.ErrorIs(t, err, nccl.InvalidArgument)
		})
	}
}

// TestInitRankScalableReachesTheRealLibrary checks that ncclCommInitRankScalable is
// called and that, without a GPU, its failure comes back as NCCL's result instead of a
// crash. libnccl 2.29.7 returns from that failure with its group still open on the
// calling thread (ncclGroupStartInternal, then CUDACHECK's early return), so the call
// runs on a thread of its own that ends with it: the rest of the tests keep a clean
// thread state.
func TestInitRankScalableReachesTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	a, err := UniqueID()
	require.NoError(t, err)
	b, err := UniqueID()
	require.NoError(t, err)
	var c gpulib.Comm
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		c, err = d.CommInitRankScalable(2, []gpulib.UniqueID{a, b}, 0, gpulib.Config{Blocking: true})
	}()
	<-done
	if err == nil {
		_ = d.CommAbort(c)
		t.Skip("a GPU is present: the gpu-tagged tests cover the initialisation")
	}
	var se *gpulib.Error
	require.ErrorAs(t, err, &se)
	t.Logf("without a GPU: %v", err)
	assert.Equal(t, gpulib.UnhandledCudaError, se.Code, "it asks CUDA for the device first")
}
