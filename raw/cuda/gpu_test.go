//go:build gpu

package cuda_test

// GPU checks of the raw CUDA driver binding (build tag gpu). The GPU bundle
// (docs/gpu.md) runs them on a machine with an NVIDIA GPU:
//
//	go test -tags gpu -run GPU ./raw/cuda
//
// Without a driver or a device they skip and say why.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/kernels"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// device is device 0 with its retained primary context, shared by the tests of the process.
type device struct {
	dev cuda.Device
	ctx cuda.Context
	sms int
}

// errNoGPU marks the reasons to skip: no driver, no device, no cgo.
var errNoGPU = errors.New("no usable GPU")

var openDevice = sync.OnceValues(func() (*device, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.Init(0); err != nil {
		if errors.Is(err, cuda.ErrorNoDevice) || errors.Is(err, cuda.ErrLibraryNotFound) || errors.Is(err, cuda.ErrNeedsCgo) {
			return nil, fmt.Errorf("%w: cuInit: %w (NCCLGO_LIBCUDA selects libcuda)", errNoGPU, err)
		}
		return nil, fmt.Errorf("cuInit: %w", err)
	}
	d := &device{}
	var sms int32
	err := errors.Join(cuda.DeviceGet(&d.dev, 0),
		cuda.DeviceGetAttribute(&sms, cuda.DeviceAttributeMultiprocessorCount, d.dev),
		cuda.DevicePrimaryCtxRetain(&d.ctx, d.dev))
	d.sms = int(sms)
	return d, err
})

// gpu returns the shared device, skipping tb when there is none.
func gpu(tb testing.TB) *device {
	tb.Helper()
	d, err := openDevice()
	if errors.Is(err, errNoGPU) {
		tb.Skip(err.Error())
	}
	require.NoError(tb, err)
	return d
}

// do runs f on a locked OS thread with the device's context current and fails tb, saying
// what was done, if f returns an error.
func (d *device) do(tb testing.TB, what string, f func() error) {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(tb, cuda.CtxSetCurrent(d.ctx), "set the context current for %s", what)
	require.NoError(tb, f(), what)
}

// alloc returns bytes of device memory, freed when tb ends.
func (d *device) alloc(tb testing.TB, bytes int) cuda.Deviceptr {
	tb.Helper()
	var p cuda.Deviceptr
	d.do(tb, "cuMemAlloc "+strconv.Itoa(bytes), func() error { return cuda.MemAlloc(&p, uint64(bytes)) })
	tb.Cleanup(func() { d.do(tb, "cuMemFree", func() error { return cuda.MemFree(p) }) })
	return p
}

// hostAlloc returns bytes of page-locked host memory (what asynchronous copies need),
// freed when tb ends.
func (d *device) hostAlloc(tb testing.TB, bytes int) []byte {
	tb.Helper()
	var p unsafe.Pointer
	d.do(tb, "cuMemAllocHost", func() error { return cuda.MemAllocHost(&p, uint64(bytes)) })
	tb.Cleanup(func() { d.do(tb, "cuMemFreeHost", func() error { return cuda.MemFreeHost(p) }) })
	return unsafe.Slice((*byte)(p), bytes)
}

// upload copies src to dst and waits until the data is there (cudatest.Upload).
func (d *device) upload(tb testing.TB, dst cuda.Deviceptr, src []byte) {
	tb.Helper()
	d.do(tb, "upload", func() error { return cudatest.Upload(dst, src) })
}

// download waits for the context's work, then copies n bytes from src (cudatest.Download).
func (d *device) download(tb testing.TB, src cuda.Deviceptr, n int) []byte {
	tb.Helper()
	out := make([]byte, n)
	d.do(tb, "download", func() error { return cudatest.Download(out, src) })
	return out
}

func (d *device) stream(tb testing.TB) cuda.Stream {
	tb.Helper()
	var s cuda.Stream
	d.do(tb, "cuStreamCreate", func() error { return cuda.StreamCreate(&s, uint32(cuda.StreamNonBlocking)) })
	tb.Cleanup(func() { d.do(tb, "cuStreamDestroy", func() error { return cuda.StreamDestroy(s) }) })
	return s
}

func (d *device) event(tb testing.TB, flags cuda.EventFlags) cuda.Event {
	tb.Helper()
	var e cuda.Event
	d.do(tb, "cuEventCreate", func() error { return cuda.EventCreate(&e, uint32(flags)) })
	tb.Cleanup(func() { d.do(tb, "cuEventDestroy", func() error { return cuda.EventDestroy(e) }) })
	return e
}

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// cString returns s as a NUL-terminated byte string for the driver.
func cString(s string) *byte { return &append([]byte(s), 0)[0] }

// goString is the text of a NUL-terminated buffer the driver filled.
func goString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// requireReadyOrNotReady checks what cuStreamQuery or cuEventQuery may answer while work
// may still be running.
func requireReadyOrNotReady(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, cuda.ErrorNotReady, what)
	}
}

var pciBusID = regexp.MustCompile(`^[0-9A-Fa-f]{4,8}:([0-9A-Fa-f]{2}):[0-9A-Fa-f]{2}\.[0-7]$`)

func TestGPUDeviceQueryDescribesEveryDevice(t *testing.T) {
	gpu(t)
	var count int32
	require.NoError(t, cuda.DeviceGetCount(&count))
	require.Positive(t, count)
	for ordinal := range count {
		t.Run(fmt.Sprintf("device %d", ordinal), func(t *testing.T) {
			var dev cuda.Device
			require.NoError(t, cuda.DeviceGet(&dev, ordinal))

			name := make([]byte, 256)
			require.NoError(t, cuda.DeviceGetName(&name[0], int32(len(name)), dev))
			assert.NotEmpty(t, goString(name))

			var total uint64
			require.NoError(t, cuda.DeviceTotalMem(&total, dev))
			assert.Greater(t, total, uint64(1<<30), "total memory in bytes")

			var major, minor, bus int32
			require.NoError(t, errors.Join(
				cuda.DeviceGetAttribute(&major, cuda.DeviceAttributeComputeCapabilityMajor, dev),
				cuda.DeviceGetAttribute(&minor, cuda.DeviceAttributeComputeCapabilityMinor, dev),
				cuda.DeviceGetAttribute(&bus, cuda.DeviceAttributePciBusId, dev)))
			assert.GreaterOrEqual(t, major, int32(5), "a driver of CUDA 12 or newer supports compute capability 5.0 and up")
			assert.GreaterOrEqual(t, minor, int32(0))

			// The bus id string, its bus field against the attribute, and the way back.
			buf := make([]byte, 64)
			require.NoError(t, cuda.DeviceGetPCIBusId(&buf[0], int32(len(buf)), dev))
			id := goString(buf)
			m := pciBusID.FindStringSubmatch(id)
			require.NotNil(t, m, "PCI bus id %q", id)
			busField, err := strconv.ParseInt(m[1], 16, 32)
			require.NoError(t, err)
			assert.EqualValues(t, bus, busField, "bus of %q", id)
			var back cuda.Device
			require.NoError(t, cuda.DeviceGetByPCIBusId(&back, cString(id)))
			assert.Equal(t, dev, back)

			t.Logf("%s: %.1f GiB, compute capability %d.%d, PCI %s", goString(name), float64(total)/(1<<30), major, minor, id)
		})
	}
	t.Run("ordinal past the last device", func(t *testing.T) {
		var dev cuda.Device
		require.ErrorIs(t, cuda.DeviceGet(&dev, count), cuda.ErrorInvalidDevice)
	})
}

func TestGPUPrimaryContextRetainAndSetCurrent(t *testing.T) {
	d := gpu(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var again cuda.Context
	require.NoError(t, cuda.DevicePrimaryCtxRetain(&again, d.dev))
	assert.Equal(t, d.ctx, again, "the primary context is one per device")
	require.NoError(t, cuda.CtxSetCurrent(again))

	var cur cuda.Context
	var dev cuda.Device
	require.NoError(t, cuda.CtxGetCurrent(&cur))
	require.NoError(t, cuda.CtxGetDevice(&dev))
	assert.Equal(t, d.ctx, cur)
	assert.Equal(t, d.dev, dev)

	var flags uint32
	var active int32
	require.NoError(t, cuda.DevicePrimaryCtxGetState(d.dev, &flags, &active))
	assert.EqualValues(t, 1, active)

	var free, total, devTotal uint64
	require.NoError(t, cuda.MemGetInfo(&free, &total))
	require.NoError(t, cuda.DeviceTotalMem(&devTotal, d.dev))
	assert.Equal(t, devTotal, total)
	assert.LessOrEqual(t, free, total)

	// Releasing the second retain leaves the first: the context stays active.
	require.NoError(t, cuda.DevicePrimaryCtxRelease(d.dev))
	require.NoError(t, cuda.DevicePrimaryCtxGetState(d.dev, &flags, &active))
	assert.EqualValues(t, 1, active)
}

func TestGPUMemcpyRoundTripsContent(t *testing.T) {
	d := gpu(t)
	for _, n := range []int{1, 3, 4096, 1<<20 + 7, 64 << 20} {
		t.Run(strconv.Itoa(n)+" bytes", func(t *testing.T) {
			want := randomBytes(n, uint64(n))
			a, b := d.alloc(t, n), d.alloc(t, n)
			d.upload(t, a, want)
			d.do(t, "cuMemsetD8", func() error { return cuda.MemsetD8(b, 0x5a, uint64(n)) })
			requireBytes(t, bytesOf(0x5a, n), d.download(t, b, n), "after cuMemsetD8")
			d.do(t, "cuMemcpyDtoD", func() error { return cuda.MemcpyDtoD(b, a, uint64(n)) })
			requireBytes(t, want, d.download(t, b, n), "host to device to device to host")
		})
	}
	t.Run("zero bytes", func(t *testing.T) {
		var p cuda.Deviceptr
		d.do(t, "cuMemAlloc 0", func() error {
			if err := cuda.MemAlloc(&p, 0); !errors.Is(err, cuda.ErrorInvalidValue) {
				return fmt.Errorf("cuMemAlloc of 0 bytes: %v, want CUDA_ERROR_INVALID_VALUE", err)
			}
			return nil
		})
	})
}

// requireBytes fails t at the first byte where got differs from want.
func requireBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	require.Len(t, got, len(want), what)
	i := 0
	for want[i] == got[i] {
		i++
	}
	require.Failf(t, "contents differ", "%s: byte %d of %d is %#02x, want %#02x", what, i, len(want), got[i], want[i])
}

func bytesOf(v byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = v
	}
	return b
}

func TestGPUStreamAsyncCopiesCompleteInOrder(t *testing.T) {
	d := gpu(t)
	const n = 32 << 20
	in, out := d.hostAlloc(t, n), d.hostAlloc(t, n)
	copy(in, randomBytes(n, 3))
	clear(out)
	a, b := d.alloc(t, n), d.alloc(t, n)
	s := d.stream(t)
	d.do(t, "stream", func() error {
		var flags uint32
		if err := cuda.StreamGetFlags(s, &flags); err != nil {
			return err
		}
		if flags != uint32(cuda.StreamNonBlocking) {
			return fmt.Errorf("stream flags %d, want %d", flags, cuda.StreamNonBlocking)
		}
		err := errors.Join(cuda.MemcpyHtoDAsync(a, unsafe.Pointer(&in[0]), n, s),
			cuda.MemcpyDtoDAsync(b, a, n, s),
			cuda.MemcpyDtoHAsync(unsafe.Pointer(&out[0]), b, n, s))
		if err != nil {
			return err
		}
		requireReadyOrNotReady(t, cuda.StreamQuery(s), "cuStreamQuery while copying")
		return errors.Join(cuda.StreamSynchronize(s), cuda.StreamQuery(s))
	})
	requireBytes(t, in, out, "asynchronous host to device to device to host")
}

func TestGPUEvents(t *testing.T) {
	d := gpu(t)
	const n = 256 << 20
	x, y := d.alloc(t, n), d.alloc(t, n)
	// cuMemsetD8 runs on the legacy stream, which the non-blocking streams below do not wait for.
	d.do(t, "cuMemsetD8", func() error {
		return errors.Join(cuda.MemsetD8(x, 0xa5, n), cuda.MemsetD8(y, 0, n), cuda.CtxSynchronize())
	})

	t.Run("record, query, synchronize, elapsed time", func(t *testing.T) {
		s := d.stream(t)
		start, end := d.event(t, 0), d.event(t, 0)
		var ms float32
		d.do(t, "timed copy", func() error {
			err := errors.Join(cuda.EventRecord(start, s), cuda.MemcpyDtoDAsync(y, x, n, s), cuda.EventRecord(end, s))
			if err != nil {
				return err
			}
			requireReadyOrNotReady(t, cuda.EventQuery(end), "cuEventQuery while copying")
			return errors.Join(cuda.EventSynchronize(end), cuda.EventQuery(end), cuda.EventElapsedTime(&ms, start, end))
		})
		assert.Positive(t, ms)
		t.Logf("cuMemcpyDtoDAsync of %d MiB: %.3f ms, %.0f GB/s (read + write)", n>>20, ms, 2*n/float64(ms)/1e6)
	})

	t.Run("no elapsed time without timing", func(t *testing.T) {
		s := d.stream(t)
		start, end := d.event(t, cuda.EventDisableTiming), d.event(t, cuda.EventDisableTiming)
		d.do(t, "untimed events", func() error {
			err := errors.Join(cuda.EventRecord(start, s), cuda.EventRecord(end, s), cuda.EventSynchronize(end))
			if err != nil {
				return err
			}
			var ms float32
			if err := cuda.EventElapsedTime(&ms, start, end); !errors.Is(err, cuda.ErrorInvalidHandle) {
				return fmt.Errorf("cuEventElapsedTime without timing: %v, want CUDA_ERROR_INVALID_HANDLE", err)
			}
			return nil
		})
	})

	t.Run("stream wait event orders two streams", func(t *testing.T) {
		// s1 fills y from x; s2 waits for s1's event, then copies y's tail into z. Without
		// the wait s2 would read the zeros y held before.
		const tail = 1 << 20
		s1, s2 := d.stream(t), d.stream(t)
		done := d.event(t, cuda.EventDisableTiming)
		z := d.alloc(t, tail)
		d.do(t, "ordered copies", func() error {
			return errors.Join(cuda.MemsetD8(y, 0, n), cuda.MemsetD8(z, 0, tail), cuda.CtxSynchronize(),
				cuda.MemcpyDtoDAsync(y, x, n, s1), cuda.EventRecord(done, s1),
				cuda.StreamWaitEvent(s2, done, 0), cuda.MemcpyDtoDAsync(z, y+n-tail, tail, s2),
				cuda.StreamSynchronize(s2))
		})
		requireBytes(t, bytesOf(0xa5, tail), d.download(t, z, tail), "tail copied after the wait")
	})
}

func TestGPUShippedAddBF16KernelMatchesReference(t *testing.T) {
	d := gpu(t)
	var mod cuda.Module
	ptx := append([]byte(kernels.PTX()), 0)
	d.do(t, "cuModuleLoadData", func() error { return cuda.ModuleLoadData(&mod, unsafe.Pointer(&ptx[0])) })
	t.Cleanup(func() { d.do(t, "cuModuleUnload", func() error { return cuda.ModuleUnload(mod) }) })

	var f cuda.Function
	d.do(t, "cuModuleGetFunction", func() error {
		if err := cuda.ModuleGetFunction(&f, mod, cString("no_such_kernel")); !errors.Is(err, cuda.ErrorNotFound) {
			return fmt.Errorf("cuModuleGetFunction of a missing name: %v, want CUDA_ERROR_NOT_FOUND", err)
		}
		return cuda.ModuleGetFunction(&f, mod, cString(kernels.AddBF16Name))
	})

	const n = 1<<20 + 5 // a tail shorter than one vector
	dstBytes, srcBytes := randomBytes(2*n, 5), randomBytes(2*n, 6)
	dst, src := d.alloc(t, 2*n), d.alloc(t, 2*n)
	d.upload(t, dst, dstBytes)
	d.upload(t, src, srcBytes)
	grid, block, err := kernels.LaunchDims(n, 2, d.sms)
	require.NoError(t, err)
	args := &struct{ dst, src, n uint64 }{uint64(dst), uint64(src), n}
	params := &[3]unsafe.Pointer{unsafe.Pointer(&args.dst), unsafe.Pointer(&args.src), unsafe.Pointer(&args.n)}
	var pin runtime.Pinner
	pin.Pin(args)
	pin.Pin(params)
	defer pin.Unpin()
	d.do(t, "cuLaunchKernel", func() error {
		return errors.Join(cuda.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, 0, &params[0], nil), cuda.CtxSynchronize())
	})

	want := unsafe.Slice((*uint16)(unsafe.Pointer(&dstBytes[0])), n)
	require.NoError(t, kernels.AddBF16(want, unsafe.Slice((*uint16)(unsafe.Pointer(&srcBytes[0])), n)))
	got := d.download(t, dst, 2*n)
	requireBytes(t, dstBytes, got, "kernel output against kernels.AddBF16, bit for bit")
}
