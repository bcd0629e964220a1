package sim

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

func TestStreamRunsItsWorkInOrder(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	s, err := d.StreamCreate()
	require.NoError(t, err)
	a, _ := w.Alloc(0, 8)
	b, _ := w.Alloc(0, 8)
	require.NoError(t, w.Write(0, a, []byte{1, 2, 3, 4, 5, 6, 7, 8}))
	// b = a; a = 0-block; b[0:4] = a[0:4]: only in-order execution gives 0,0,0,0,5,6,7,8.
	zero, _ := w.Alloc(0, 8)
	require.NoError(t, d.MemcpyDtoDAsync(b, a, 8, s))
	require.NoError(t, d.MemcpyDtoDAsync(a, zero, 8, s))
	require.NoError(t, d.MemcpyDtoDAsync(b, a, 4, s))
	require.NoError(t, d.StreamSynchronize(s))
	got, _ := w.Read(0, b, 8)
	assert.Equal(t, []byte{0, 0, 0, 0, 5, 6, 7, 8}, got)
	done, err := d.StreamQuery(s)
	require.NoError(t, err)
	assert.True(t, done)
}

func TestEventsOrderWorkAcrossStreams(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	producer, _ := d.StreamCreate()
	consumer, _ := d.StreamCreate()
	f, open := gate(t, w, 0)
	src, _ := w.Alloc(0, 4)
	dst, _ := w.Alloc(0, 4)
	ev, err := d.EventCreate()
	require.NoError(t, err)

	done, err := d.EventQuery(ev)
	require.NoError(t, err)
	assert.True(t, done, "an event never recorded counts as complete")

	require.NoError(t, d.LaunchKernel(f, 1, 1, producer, gpulib.KernelArgs{}))
	require.NoError(t, w.Write(0, src, []byte{9, 9, 9, 9}))
	require.NoError(t, d.EventRecord(ev, producer))
	require.NoError(t, d.StreamWaitEvent(consumer, ev))
	require.NoError(t, d.MemcpyDtoDAsync(dst, src, 4, consumer))

	assert.True(t, never(30*time.Millisecond, func() bool {
		ok, _ := d.StreamQuery(consumer)
		return ok
	}), "the consumer must wait for the producer's event")
	done, err = d.EventQuery(ev)
	require.NoError(t, err)
	assert.False(t, done)
	got, _ := w.Read(0, dst, 4)
	assert.Equal(t, []byte{0, 0, 0, 0}, got, "the copy has not run")

	open()
	require.NoError(t, d.StreamSynchronize(consumer))
	got, _ = w.Read(0, dst, 4)
	assert.Equal(t, []byte{9, 9, 9, 9}, got)
	done, err = d.EventQuery(ev)
	require.NoError(t, err)
	assert.True(t, done)
}

func TestEventRecordCapturesOnlyWorkQueuedBefore(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	s, _ := d.StreamCreate()
	ev, _ := d.EventCreate()
	require.NoError(t, d.EventRecord(ev, s)) // empty stream: complete at once
	f, open := gate(t, w, 0)
	require.NoError(t, d.LaunchKernel(f, 1, 1, s, gpulib.KernelArgs{}))
	done, err := d.EventQuery(ev)
	require.NoError(t, err)
	assert.True(t, done)
	done, err = d.StreamQuery(s)
	require.NoError(t, err)
	assert.False(t, done)
	open()
	require.NoError(t, d.StreamSynchronize(s))
}

func TestStreamAndEventHandlesAreCheckedLikeCUDA(t *testing.T) {
	w := newWorld(t, 2)
	d0, _ := w.Driver(0)
	d1, _ := w.Driver(1)
	s1, _ := d1.StreamCreate()
	e1, _ := d1.EventCreate()
	s0, _ := d0.StreamCreate()
	e0, _ := d0.EventCreate()
	require.NoError(t, d0.StreamDestroy(s0))
	require.NoError(t, d0.EventDestroy(e0))
	p, _ := w.Alloc(0, 16)

	tests := []struct {
		name string
		call func() error
		want CUDAResult
	}{
		{"sync a stream of another device", func() error { return d0.StreamSynchronize(s1) }, ErrorInvalidHandle},
		{"query a destroyed stream", func() error { _, err := d0.StreamQuery(s0); return err }, ErrorInvalidHandle},
		{"destroy a stream twice", func() error { return d0.StreamDestroy(s0) }, ErrorInvalidHandle},
		{"destroy the legacy stream", func() error { return d0.StreamDestroy(0) }, ErrorInvalidHandle},
		{"record an event of another device", func() error { return d0.EventRecord(e1, 0) }, ErrorInvalidHandle},
		{"query a destroyed event", func() error { _, err := d0.EventQuery(e0); return err }, ErrorInvalidHandle},
		{"wait on a destroyed event", func() error { return d0.StreamWaitEvent(0, e0) }, ErrorInvalidHandle},
		{"a stream handle used as an event", func() error { return d1.EventRecord(gpulib.Event(s1), s1) }, ErrorInvalidHandle},
		{"copy on a destroyed stream", func() error { return d0.MemcpyDtoDAsync(p, p+8, 8, s0) }, ErrorInvalidHandle},
		{"copy out of bounds", func() error { return d0.MemcpyDtoDAsync(p, p+8, 9, 0) }, ErrorInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, cudaCode(tt.call()))
		})
	}
	assert.NoError(t, d0.StreamSynchronize(0), "the legacy default stream always exists")
}

func TestAddKernelsMatchTheKernelsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		es   int
		ref  func(dst, src []byte) error
	}{
		{kernels.AddBF16Name, 2, addU16(kernels.AddBF16)},
		{kernels.AddF16Name, 2, addU16(kernels.AddF16)},
		{kernels.AddF32Name, 4, addF32},
	}
	for _, tt := range tests {
		for _, n := range []int{0, 1, 7, 8, 33, 1000} {
			for _, off := range []int{0, tt.es, 3 * tt.es} { // offsets not 16-byte aligned
				w := newWorld(t, 1)
				d, _ := w.Driver(0)
				f, err := w.LoadKernel(0, tt.name)
				require.NoError(t, err)
				bytes := uint64(n*tt.es + off)
				dst, _ := w.Alloc(0, max(bytes, 1))
				src, _ := w.Alloc(0, max(bytes, 1))
				a, b := make([]byte, bytes), make([]byte, bytes)
				for i := range a {
					a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
				}
				require.NoError(t, w.Write(0, dst, a))
				require.NoError(t, w.Write(0, src, b))
				args := gpulib.KernelArgs{N: 3, V: [4]uint64{uint64(dst) + uint64(off), uint64(src) + uint64(off), uint64(n)}}
				require.NoError(t, d.LaunchKernel(f, 4, 256, 0, args))
				require.NoError(t, d.StreamSynchronize(0))

				want := append([]byte{}, a...)
				require.NoError(t, tt.ref(want[off:], b[off:]))
				got, _ := w.Read(0, dst, bytes)
				require.Equal(t, want, got, "%s n=%d offset=%d", tt.name, n, off)
			}
		}
	}
}

// addU16 and addF32 apply a kernels reference add to little-endian byte buffers.
func addU16(add func(dst, src []uint16) error) func(dst, src []byte) error {
	return func(dst, src []byte) error {
		a, b := make([]uint16, len(dst)/2), make([]uint16, len(src)/2)
		for i := range a {
			a[i], b[i] = binary.LittleEndian.Uint16(dst[2*i:]), binary.LittleEndian.Uint16(src[2*i:])
		}
		if err := add(a, b); err != nil {
			return err
		}
		for i, v := range a {
			binary.LittleEndian.PutUint16(dst[2*i:], v)
		}
		return nil
	}
}

func addF32(dst, src []byte) error {
	a, b := make([]float32, len(dst)/4), make([]float32, len(src)/4)
	for i := range a {
		a[i] = math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:]))
		b[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
	if err := kernels.AddF32(a, b); err != nil {
		return err
	}
	for i, v := range a {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

func TestKernelFaultsAreStickyLikeACUDAContext(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	f, err := w.LoadKernel(0, kernels.AddBF16Name)
	require.NoError(t, err)
	p, _ := w.Alloc(0, 8)

	require.NoError(t, d.LaunchKernel(f, 1, 32, 0, gpulib.KernelArgs{N: 3, V: [4]uint64{uint64(p), uint64(p), 5}}),
		"the launch itself succeeds: the access is checked when the kernel runs")
	err = d.StreamSynchronize(0)
	assert.Equal(t, ErrorIllegalAddress, cudaCode(err))
	_, err = d.MemAlloc(8)
	assert.Equal(t, ErrorIllegalAddress, cudaCode(err), "every later CUDA call fails")
}

func TestMisalignedAddKernelFaults(t *testing.T) {
	w := newWorld(t, 1)
	d, _ := w.Driver(0)
	f, _ := w.LoadKernel(0, kernels.AddF32Name)
	p, _ := w.Alloc(0, 64)
	require.NoError(t, d.LaunchKernel(f, 1, 32, 0, gpulib.KernelArgs{N: 3, V: [4]uint64{uint64(p) + 2, uint64(p) + 32, 4}}))
	assert.Equal(t, ErrorMisalignedAddress, cudaCode(d.StreamSynchronize(0)))
}

func TestLaunchKernelChecksItsArguments(t *testing.T) {
	w := newWorld(t, 2)
	d, _ := w.Driver(0)
	f, _ := w.LoadKernel(0, kernels.AddBF16Name)
	f1, _ := w.LoadKernel(1, kernels.AddBF16Name)
	args := gpulib.KernelArgs{N: 3}
	tests := []struct {
		name        string
		f           gpulib.Function
		grid, block uint32
		args        gpulib.KernelArgs
		want        CUDAResult
	}{
		{"unknown function", 0x42, 1, 1, args, ErrorInvalidHandle},
		{"function of another device", f1, 1, 1, args, ErrorInvalidHandle},
		{"empty grid", f, 0, 1, args, ErrorInvalidValue},
		{"block too large", f, 1, 1025, args, ErrorInvalidValue},
		{"wrong parameter count", f, 1, 1, gpulib.KernelArgs{N: 2}, ErrorInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, cudaCode(d.LaunchKernel(tt.f, tt.grid, tt.block, 0, tt.args)))
		})
	}
	_, err := w.LoadKernel(0, "no_such_kernel")
	assert.Equal(t, ErrorNotFound, cudaCode(err))
	assert.Error(t, w.RegisterKernel("", Kernel{}))
}
