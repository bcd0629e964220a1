//go:build gpu

package kernels

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// gpu is device 0 with its primary context, the loaded add kernels and a
// stream, shared by every GPU test of the process.
type gpu struct {
	name   string
	dev    cuda.Device
	ctx    cuda.Context
	sms    int
	mod    *Module
	stream cuda.Stream
}

var (
	gpuOnce sync.Once
	gpuDev  *gpu
	gpuSkip string
	gpuErr  error
)

// openGPU returns the shared device, skipping tb when there is no usable
// GPU (no libcuda, no device, compute capability below 8.0).
func openGPU(tb testing.TB) *gpu {
	tb.Helper()
	gpuOnce.Do(func() { gpuDev, gpuSkip, gpuErr = newGPU() })
	if gpuSkip != "" {
		tb.Skip(gpuSkip)
	}
	require.NoError(tb, gpuErr)
	return gpuDev
}

func newGPU() (*gpu, string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.Init(0); err != nil {
		if errors.Is(err, cuda.ErrorNoDevice) || errors.Is(err, cuda.ErrLibraryNotFound) || errors.Is(err, cuda.ErrNeedsCgo) {
			return nil, "no usable GPU: " + err.Error(), nil
		}
		return nil, "", err
	}
	g := &gpu{}
	if err := cuda.DeviceGet(&g.dev, 0); err != nil {
		return nil, "", err
	}
	var major, sms int32
	if err := cuda.DeviceGetAttribute(&major, cuda.DeviceAttributeComputeCapabilityMajor, g.dev); err != nil {
		return nil, "", err
	}
	if major < 8 {
		return nil, "the add kernels need compute capability 8.0 or newer", nil
	}
	if err := cuda.DeviceGetAttribute(&sms, cuda.DeviceAttributeMultiprocessorCount, g.dev); err != nil {
		return nil, "", err
	}
	g.sms = int(sms)
	name := make([]byte, 256)
	if err := cuda.DeviceGetName(&name[0], int32(len(name)), g.dev); err != nil {
		return nil, "", err
	}
	g.name = string(name[:clen(name)])
	if err := cuda.DevicePrimaryCtxRetain(&g.ctx, g.dev); err != nil {
		return nil, "", err
	}
	if err := cuda.CtxSetCurrent(g.ctx); err != nil {
		return nil, "", err
	}
	mod, err := Load()
	if err != nil {
		return nil, "", err
	}
	g.mod = mod
	if err := cuda.StreamCreate(&g.stream, 1 /* CU_STREAM_NON_BLOCKING */); err != nil {
		return nil, "", err
	}
	return g, "", nil
}

func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}

// do runs f with the device's context current on a locked OS thread.
func (g *gpu) do(tb testing.TB, what string, f func() error) {
	tb.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(tb, cuda.CtxSetCurrent(g.ctx), "set context for %s", what)
	require.NoError(tb, f(), what)
}

func (g *gpu) alloc(tb testing.TB, bytes int) cuda.Deviceptr {
	tb.Helper()
	var p cuda.Deviceptr
	g.do(tb, "cuMemAlloc", func() error { return cuda.MemAlloc(&p, uint64(bytes)) })
	tb.Cleanup(func() { g.do(tb, "cuMemFree", func() error { return cuda.MemFree(p) }) })
	return p
}

// memset fills bytes at p and waits until they are set: cuMemsetD8 runs on the legacy
// stream, which g.stream (non-blocking) does not wait for.
func (g *gpu) memset(tb testing.TB, p cuda.Deviceptr, bytes int) {
	g.do(tb, "fill", func() error { return cudatest.Fill(p, 0x3c, bytes) })
}

// launch enqueues k's add kernel on g.stream for n elements.
func (g *gpu) launch(tb testing.TB, k Kind, dst, src cuda.Deviceptr, n int) {
	tb.Helper()
	f, err := g.mod.Func(k)
	require.NoError(tb, err)
	size, err := k.ElemSize()
	require.NoError(tb, err)
	grid, block, err := LaunchDims(n, size, g.sms)
	require.NoError(tb, err)
	args := &struct{ dst, src, n uint64 }{uint64(dst), uint64(src), uint64(n)}
	params := &[3]unsafe.Pointer{unsafe.Pointer(&args.dst), unsafe.Pointer(&args.src), unsafe.Pointer(&args.n)}
	var pin runtime.Pinner
	pin.Pin(args)
	pin.Pin(params)
	defer pin.Unpin()
	g.do(tb, "cuLaunchKernel "+k.String(), func() error {
		return cuda.LaunchKernel(cuda.Function(f), grid, 1, 1, block, 1, 1, 0, g.stream, &params[0], nil)
	})
}

func (g *gpu) copyDtoD(tb testing.TB, dst, src cuda.Deviceptr, bytes int) {
	g.do(tb, "cuMemcpyDtoDAsync", func() error { return cuda.MemcpyDtoDAsync(dst, src, uint64(bytes), g.stream) })
}

func (g *gpu) sync(tb testing.TB) {
	g.do(tb, "cuStreamSynchronize", func() error { return cuda.StreamSynchronize(g.stream) })
}

// timed returns the seconds reps calls of fn take on g.stream, by events.
func (g *gpu) timed(tb testing.TB, reps int, fn func()) float64 {
	tb.Helper()
	var start, end cuda.Event
	g.do(tb, "cuEventCreate", func() error {
		return errors.Join(cuda.EventCreate(&start, 0), cuda.EventCreate(&end, 0))
	})
	defer g.do(tb, "cuEventDestroy", func() error { return errors.Join(cuda.EventDestroy(start), cuda.EventDestroy(end)) })
	g.do(tb, "cuEventRecord", func() error { return cuda.EventRecord(start, g.stream) })
	for range reps {
		fn()
	}
	var ms float32
	g.do(tb, "cuEventElapsedTime", func() error {
		return errors.Join(cuda.EventRecord(end, g.stream), cuda.EventSynchronize(end), cuda.EventElapsedTime(&ms, start, end))
	})
	return float64(ms) / 1e3
}

// addHost copies the host buffers to the device, adds n elements of kind k
// at element offsets dOff and sOff, and copies the whole dst buffer back
// over the host one. The uploads have landed before the launch: from pageable
// memory cuMemcpyHtoD may return first, and g.stream does not wait for it.
func (g *gpu) addHost(tb testing.TB, k Kind, dst unsafe.Pointer, dstBytes int, src unsafe.Pointer, srcBytes, dOff, sOff, n int) {
	tb.Helper()
	size, err := k.ElemSize()
	require.NoError(tb, err)
	d := g.alloc(tb, max(dstBytes, 1))
	s := g.alloc(tb, max(srcBytes, 1))
	g.do(tb, "upload", func() error {
		return errors.Join(cudatest.Upload(d, unsafe.Slice((*byte)(dst), dstBytes)), cudatest.Upload(s, unsafe.Slice((*byte)(src), srcBytes)))
	})
	g.launch(tb, k, d+cuda.Deviceptr(dOff*size), s+cuda.Deviceptr(sOff*size), n)
	g.sync(tb)
	g.do(tb, "download", func() error { return cudatest.Download(unsafe.Slice((*byte)(dst), dstBytes), d) })
}

func (g *gpu) add16(tb testing.TB, k Kind, dst, src []uint16) []uint16 {
	got := append([]uint16(nil), dst...)
	g.addHost(tb, k, unsafe.Pointer(unsafe.SliceData(got)), 2*len(got), unsafe.Pointer(unsafe.SliceData(src)), 2*len(src), 0, 0, len(got))
	return got
}

func (g *gpu) add32(tb testing.TB, dst, src []float32) []float32 {
	got := append([]float32(nil), dst...)
	g.addHost(tb, F32, unsafe.Pointer(unsafe.SliceData(got)), 4*len(got), unsafe.Pointer(unsafe.SliceData(src)), 4*len(src), 0, 0, len(got))
	return got
}

func (g *gpu) addBytes(tb testing.TB, k Kind, dstAll, srcAll []byte, dOff, sOff, n int) []byte {
	got := append([]byte(nil), dstAll...)
	g.addHost(tb, k, unsafe.Pointer(unsafe.SliceData(got)), len(got), unsafe.Pointer(unsafe.SliceData(srcAll)), len(srcAll), dOff, sOff, n)
	return got
}
