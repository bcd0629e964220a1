//go:build gpu && cgo

package nccl

import (
	"context"
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// gpuBackend is a one-rank backend on device 0, or a skip without a GPU.
func gpuBackend(t *testing.T, ctx context.Context) *Backend {
	t.Helper()
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	id, err := NewUniqueID()
	require.NoError(t, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	return b
}

// TestGPUSuspendReleasesNCCLMemoryUntilResume suspends a communicator on the real
// GPU: the statistics say suspended, operations fail at once with ErrSuspended, and
// after Resume an AllReduce runs again.
func TestGPUSuspendReleasesNCCLMemoryUntilResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := gpuBackend(t, ctx)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, b.c.d.SetDevice())
	buf, err := b.c.d.MemAlloc(64)
	require.NoError(t, err)
	defer func() { _ = b.c.d.MemFree(buf) }()
	require.NoError(t, b.AllReduce(comm.DevicePtr(buf), 64), "NCCL sets up its buffers")

	before, err := b.MemStats()
	require.NoError(t, err)
	t.Logf("before suspend: %+v", before)
	assert.False(t, before.Suspended)
	assert.Equal(t, before.Persistent+before.Suspendable, before.Total)

	require.NoError(t, b.Suspend(ctx))
	during, err := b.MemStats()
	require.NoError(t, err)
	t.Logf("suspended: %+v", during)
	assert.True(t, during.Suspended)
	assert.ErrorIs(t, b.AllReduce(comm.DevicePtr(buf), 64), ErrSuspended)

	require.NoError(t, b.Resume(ctx))
	after, err := b.MemStats()
	require.NoError(t, err)
	assert.False(t, after.Suspended)
	in := make([]byte, 64)
	for i := range 16 {
		binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(float32(i)))
	}
	require.NoError(t, cudatest.Upload(cuda.Deviceptr(buf), in))
	require.NoError(t, b.AllReduce(comm.DevicePtr(buf), 64))
}

// TestGPUGrowTakesANewcomerOnTheSameGPU grows a one-rank communicator to two ranks,
// the newcomer on the same device, and runs an AllReduce on the grown communicator.
func TestGPUGrowTakesANewcomerOnTheSameGPU(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := gpuBackend(t, ctx)
	id, err := b.GrowID()
	require.NoError(t, err)
	var grown [2]*Backend
	var errs [2]error
	var wg sync.WaitGroup
	wg.Go(func() { grown[0], errs[0] = b.Grow(ctx, 2, &id) })
	wg.Go(func() {
		grown[1], errs[1] = Join(ctx, id, 1, 2, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	})
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer func() {
		for _, g := range grown {
			assert.NoError(t, g.Close())
		}
	}()
	for r, g := range grown {
		assert.Equal(t, r, g.Rank())
		assert.Equal(t, 2, g.WorldSize())
	}
	for r, err := range onBoth(grown, func(g *Backend) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := g.c.d.SetDevice(); err != nil {
			return err
		}
		buf, err := g.c.d.MemAlloc(64)
		if err != nil {
			return err
		}
		defer func() { _ = g.c.d.MemFree(buf) }()
		return g.AllReduce(comm.DevicePtr(buf), 64)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
}

func onBoth(bs [2]*Backend, f func(*Backend) error) [2]error {
	var errs [2]error
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { errs[r] = f(b) })
	}
	wg.Wait()
	return errs
}

// TestGPUNewAllAndNewScalableOnOneGPU brings up a one-rank communicator with NewAll
// (device 0) and one with NewScalable (one id) on the real GPU and runs an AllReduce
// on each.
func TestGPUNewAllAndNewScalableOnOneGPU(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []Option{WithElementType(comm.Float32), WithTimeout(30 * time.Second)}
	all, err := NewAll(ctx, []int{0}, opts...)
	require.NoError(t, err)
	id, err := NewUniqueID()
	require.NoError(t, err)
	sc, err := NewScalable(ctx, []comm.UniqueID{id}, 0, 1, append(opts, WithDevice(0))...)
	require.NoError(t, err)
	for _, b := range []*Backend{all[0], sc} {
		func() {
			defer func() { assert.NoError(t, b.Close()) }()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			require.NoError(t, b.c.d.SetDevice())
			buf, err := b.c.d.MemAlloc(64)
			require.NoError(t, err)
			defer func() { _ = b.c.d.MemFree(buf) }()
			require.NoError(t, b.AllReduce(comm.DevicePtr(buf), 64))
		}()
	}
}
