package sim

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

func TestMemAllocReadWriteAtAnyOffsetInsideTheAllocation(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	p, err := d.MemAlloc(100)
	require.NoError(t, err)
	assert.Zero(t, uint64(p)%allocAlign, "cuMemAlloc alignment")
	zero, err := w.Read(0, p, 100)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 100), zero, "fresh memory is zeroed")

	for _, off := range []uint64{0, 1, 3, 97} {
		data := bytes.Repeat([]byte{byte(off + 1)}, int(100-off))
		require.NoError(t, w.Write(0, p+gpulib.Ptr(off), data), "offset %d", off)
		got, err := w.Read(0, p+gpulib.Ptr(off), 100-off)
		require.NoError(t, err)
		assert.Equal(t, data, got, "offset %d", off)
	}
}

func TestMemoryAccessOutsideLiveAllocationsIsAnErrorNotAPanic(t *testing.T) {
	w := newWorld(t, 2, WithMemoryLimit(1<<20))
	d0, _ := w.Driver(0)
	p, err := d0.MemAlloc(64)
	require.NoError(t, err)
	freed, err := d0.MemAlloc(64)
	require.NoError(t, err)
	require.NoError(t, d0.MemFree(freed))
	other, err := w.Alloc(1, 64)
	require.NoError(t, err)

	tests := []struct {
		name string
		ptr  gpulib.Ptr
		n    uint64
		want string
	}{
		{"null", 0, 1, "null pointer"},
		{"one past the end", p + 64, 1, "in no allocation"},
		{"range runs past the end", p + 60, 8, "runs 4 bytes past the end"},
		{"freed block", freed + 8, 4, "freed memory"},
		{"another device's memory", other, 4, "not an address of device 0"},
		{"huge length", p, 1 << 62, "past the end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.Read(0, tt.ptr, tt.n)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if tt.n <= 16 {
				assert.Error(t, w.Write(0, tt.ptr, make([]byte, tt.n)))
			}
		})
	}
}

func TestMemFreeRejectsWhatItDidNotAllocate(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	p, err := d.MemAlloc(256)
	require.NoError(t, err)
	np, err := d.MemAllocNCCL(256)
	require.NoError(t, err)

	tests := []struct {
		name string
		free func() error
		cuda bool
	}{
		{"interior pointer", func() error { return d.MemFree(p + 8) }, true},
		{"ncclMemAlloc memory with cuMemFree", func() error { return d.MemFree(np) }, true},
		{"cuMemAlloc memory with ncclMemFree", func() error { return d.MemFreeNCCL(p) }, false},
		{"null with cuMemFree", func() error { return d.MemFree(0) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.free()
			require.Error(t, err)
			if tt.cuda {
				assert.Equal(t, ErrorInvalidValue, cudaCode(err))
			} else {
				assert.Equal(t, gpulib.InvalidArgument, ncclCode(err))
			}
		})
	}
	require.NoError(t, d.MemFree(p))
	assert.Equal(t, ErrorInvalidValue, cudaCode(d.MemFree(p)), "double free")
	require.NoError(t, d.MemFreeNCCL(np))
	assert.Equal(t, gpulib.InvalidArgument, ncclCode(d.MemFreeNCCL(np)), "double ncclMemFree")
	assert.NoError(t, d.MemFreeNCCL(0), "ncclMemFree(NULL) is a no-op")
	u, err := w.Usage(0)
	require.NoError(t, err)
	assert.Equal(t, Usage{}, u)
}

func TestMemAllocFailsBeyondTheLimitAndOnZeroBytes(t *testing.T) {
	w := newWorld(t, 1, WithMemoryLimit(1000))
	d, _ := w.Driver(0)
	_, err := d.MemAlloc(0)
	assert.Equal(t, ErrorInvalidValue, cudaCode(err))
	p, err := d.MemAlloc(600)
	require.NoError(t, err)
	_, err = d.MemAlloc(600)
	assert.Equal(t, ErrorOutOfMemory, cudaCode(err))
	_, err = d.MemAllocNCCL(600)
	assert.Equal(t, gpulib.UnhandledCudaError, ncclCode(err))
	require.NoError(t, d.MemFree(p))
	_, err = d.MemAlloc(600)
	assert.NoError(t, err, "freed memory is available again")
}

func TestNCCLMemAllocIsAlignedForWindows(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	for range 3 {
		p, err := d.MemAllocNCCL(10)
		require.NoError(t, err)
		assert.Zero(t, uint64(p)%winAlignment)
	}
	u, err := w.Usage(0)
	require.NoError(t, err)
	assert.Equal(t, 3, u.NCCLAllocs)
	assert.Equal(t, uint64(30), u.Bytes)
}

// Host copies are ordered on their stream: the host's bytes are taken at the call, the
// device's land in the host buffer once the stream is synchronized; a copy touching
// memory outside an allocation fails at the call.
func TestHostCopiesAreOrderedOnTheirStream(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	p, err := d.MemAlloc(16)
	require.NoError(t, err)
	s, err := d.StreamCreate()
	require.NoError(t, err)
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	require.NoError(t, d.MemcpyHtoDAsync(p+4, src, s))
	src[0] = 99 // the copy took the bytes at the call
	got := make([]byte, 12)
	require.NoError(t, d.MemcpyDtoHAsync(got, p, s))
	require.NoError(t, d.StreamSynchronize(s))
	assert.Equal(t, []byte{0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, got)

	var e *CUDAError
	require.ErrorAs(t, d.MemcpyHtoDAsync(p+12, src, s), &e)
	assert.Equal(t, ErrorInvalidValue, e.Code)
	require.ErrorAs(t, d.MemcpyDtoHAsync(make([]byte, 32), p, s), &e)
	assert.Equal(t, int64(2), d.Calls("cuMemcpyHtoDAsync_v2"))
}
