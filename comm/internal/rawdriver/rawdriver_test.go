//go:build cgo

package rawdriver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestVersionAndUniqueIDFromTheRealLibrary checks the calls that work without a GPU.
func TestVersionAndUniqueIDFromTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	v, err := d.Version()
	require.NoError(t, err)
	assert.Equal(t, 22907, v)

	a, err := UniqueID()
	require.NoError(t, err)
	b, err := d.GetUniqueID()
	require.NoError(t, err)
	assert.NotEqual(t, gpulib.UniqueID{}, a)
	assert.NotEqual(t, a, b, "every id is new")
}

// TestNCCLFailuresBecomeSeamErrors checks that an NCCL failure reaches comm as a
// *gpulib.Error with NCCL's result, keeping raw's *nccl.Error reachable.
func TestNCCLFailuresBecomeSeamErrors(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	calls := map[string]func() error{
		"AllReduce": func() error { return d.AllReduce(0x1000, 0x1000, 8, gpulib.Bfloat16, gpulib.Sum, 0, 0) },
		"Broadcast": func() error { return d.Broadcast(0x1000, 0x1000, 8, gpulib.Uint8, 0, 0, 0) },
		"Send":      func() error { return d.Send(0x1000, 8, gpulib.Uint8, 1, 0, 0) },
		"CommGetAsyncError": func() error {
			_, err := d.CommGetAsyncError(0)
			return err
		},
		"CommRegister": func() error {
			_, err := d.CommRegister(0, 0x1000, 64)
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			err := call()
			var se *gpulib.Error
			require.ErrorAs(t, err, &se)
			assert.Equal(t, gpulib.InvalidArgument, se.Code, "a null communicator is an invalid argument")
			var ne *nccl.Error
			assert.ErrorAs(t, err, &ne)
			assert.ErrorIs(t, err, nccl.InvalidArgument)
		})
	}
}

// TestNewWithoutGPUFailsWithTheDriverError checks that New reports cuInit's failure on
// a machine without a GPU (and succeeds where there is one).
func TestNewWithoutGPUFailsWithTheDriverError(t *testing.T) {
	libcache.Load(t)
	d, err := New(-1, 0)
	if err == nil {
		require.NoError(t, d.SetDevice())
		s, err := d.StreamCreate()
		require.NoError(t, err)
		done, err := d.StreamQuery(s)
		require.NoError(t, err)
		assert.True(t, done, "an empty stream is complete")
		capturing, err := d.StreamIsCapturing(s)
		require.NoError(t, err)
		assert.False(t, capturing, "a new stream is not capturing")
		require.NoError(t, d.StreamDestroy(s))
		return
	}
	var r cuda.Result
	require.ErrorAs(t, err, &r)
	assert.Contains(t, err.Error(), "cuInit")

	// Without a context the CUDA calls fail with the driver's result, never a crash.
	_, err = (&Driver{}).StreamQuery(1)
	assert.True(t, errors.As(err, &r), "%v", err)
	_, err = (&Driver{}).StreamIsCapturing(1)
	assert.True(t, errors.As(err, &r), "%v", err)
}

// TestLaunchKernelAllocatesNothing checks that a launch (the two-rank all-reduce path's
// add kernel) reuses the driver's pinned parameter array: it allocates no more than the
// bare cuLaunchKernel call. The null function makes CUDA reject the launch at once
// (there is no GPU here; the rejection's error value may itself allocate, in both), which
// also checks that a rejected launch is CUDA's error.
func TestLaunchKernelAllocatesNothing(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	args := gpulib.KernelArgs{N: 3, V: [4]uint64{0x1000, 0x2000, 8}}
	launch := func() { _ = d.LaunchKernel(0, 1, 256, 0, args) }
	bare := func() { _ = cuda.LaunchKernel(0, 1, 1, 1, 256, 1, 1, 0, 0, nil, nil) }
	launch()
	bare()
	assert.Equal(t, testing.AllocsPerRun(100, bare), testing.AllocsPerRun(100, launch))
	var r cuda.Result
	assert.ErrorAs(t, d.LaunchKernel(0, 1, 256, 0, args), &r)
	assert.Error(t, d.LaunchKernel(0, 1, 256, 0, gpulib.KernelArgs{N: 5}), "more than 4 parameters")
}

// TestMultiprocessorCountReportsTheDriverError checks the SM count query on a device
// that does not exist (no GPU here, or an ordinal beyond the visible ones).
func TestMultiprocessorCountReportsTheDriverError(t *testing.T) {
	libcache.Load(t)
	d := &Driver{ordinal: 1 << 20, dev: cuda.Device(1 << 20)}
	n, err := d.MultiprocessorCount()
	var r cuda.Result
	require.ErrorAs(t, err, &r)
	assert.Zero(t, n)
	assert.Contains(t, err.Error(), "cuDeviceGetAttribute(multiprocessor count, device 1048576)")
}

// TestHostCopiesReportTheDriverError checks gpulib.HostCopier against the real libcuda:
// without a context (no GPU here, or none made current) a copy fails with CUDA's
// result instead of crashing, and an empty copy calls nothing.
func TestHostCopiesReportTheDriverError(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	var r cuda.Result
	require.ErrorAs(t, d.MemcpyHtoDAsync(0x1000, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0), &r)
	require.ErrorAs(t, d.MemcpyDtoHAsync(make([]byte, 8), 0x1000, 0), &r)
	assert.NoError(t, d.MemcpyHtoDAsync(0x1000, nil, 0))
	assert.NoError(t, d.MemcpyDtoHAsync(nil, 0x1000, 0))
}
