//go:build cgo

package nccl

import (
	"testing"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// oneSidedReal is realCalls with the one-sided calls made on the real library (which
// rejects the null communicator) and answered with success, as the production driver
// does when the library succeeds (see BenchmarkAllReduceVsRaw).
type oneSidedReal struct{ realCalls }

func (oneSidedReal) WaitSignal([]gpulib.SignalDesc, gpulib.Comm, gpulib.Stream) error { return nil }
func (oneSidedReal) WinGetUserPtr(gpulib.Comm, gpulib.Handle) (gpulib.Ptr, error)     { return 0, nil }
func (oneSidedReal) PutSignal(local gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, win gpulib.Handle, offset uint64, sigIdx, ctx int, flags uint32, _ gpulib.Comm, _ gpulib.Stream) error {
	_ = nccl.PutSignal(ptrOf(local), count, nccl.DataType(dt), int32(peer), nccl.Window(win), offset, int32(sigIdx), int32(ctx), flags, 0, 0)
	return nil
}
func (oneSidedReal) Signal(peer, sigIdx, ctx int, flags uint32, _ gpulib.Comm, _ gpulib.Stream) error {
	_ = nccl.Signal(int32(peer), int32(sigIdx), int32(ctx), flags, 0, 0)
	return nil
}

// oneSidedLight is lightCalls with the one-sided calls replaced by ncclGetVersion.
type oneSidedLight struct{ lightCalls }

func (oneSidedLight) WaitSignal([]gpulib.SignalDesc, gpulib.Comm, gpulib.Stream) error { return nil }
func (oneSidedLight) WinGetUserPtr(gpulib.Comm, gpulib.Handle) (gpulib.Ptr, error)     { return 0, nil }
func (oneSidedLight) PutSignal(gpulib.Ptr, uint64, gpulib.DataType, int, gpulib.Handle, uint64, int, int, uint32, gpulib.Comm, gpulib.Stream) error {
	_ = lightNCCL()
	return nil
}
func (oneSidedLight) Signal(int, int, int, uint32, gpulib.Comm, gpulib.Stream) error {
	_ = lightNCCL()
	return nil
}

// BenchmarkPutSignalVsRaw measures comm's own cost on the success path of
// Backend.PutSignal (4096 bytes into a peer's window): what it adds to the one raw call
// it makes, ncclPutSignal, in the same run, as BenchmarkAllReduceVsRaw does (read its
// documentation for the sides).
func BenchmarkPutSignalVsRaw(b *testing.B) {
	libcache.Load(b)
	nb, h := oneSidedBackend(b, oneSidedReal{})
	ob, oh := oneSidedBackend(b, oneSidedStub{})
	lb, lh := oneSidedBackend(b, oneSidedLight{})
	src := comm.DevicePtr(0x21000)
	raw := func() {
		_ = nccl.PutSignal(ptrOf(gpulib.Ptr(src)), 4096, nccl.DataType(gpulib.Uint8), 1, nccl.Window(1), 0, 0, 0, 0, 0, 0)
	}
	compareWithRaw(b, comparison{
		call:     func() error { return nb.PutSignal(src, 4096, 1, h, 0, Signal{}, 3) },
		own:      func() error { return ob.PutSignal(src, 4096, 1, oh, 0, Signal{}, 3) },
		light:    func() error { return lb.PutSignal(src, 4096, 1, lh, 0, Signal{}, 3) },
		raw:      raw,
		lightRaw: lightRaw(b, true),
	})
}

// BenchmarkSignalVsRaw is BenchmarkPutSignalVsRaw for Backend.Signal (ncclSignal).
func BenchmarkSignalVsRaw(b *testing.B) {
	libcache.Load(b)
	nb, _ := oneSidedBackend(b, oneSidedReal{})
	ob, _ := oneSidedBackend(b, oneSidedStub{})
	lb, _ := oneSidedBackend(b, oneSidedLight{})
	compareWithRaw(b, comparison{
		call:     func() error { return nb.Signal(1, Signal{}, 3) },
		own:      func() error { return ob.Signal(1, Signal{}, 3) },
		light:    func() error { return lb.Signal(1, Signal{}, 3) },
		raw:      func() { _ = nccl.Signal(1, 0, 0, 0, 0, 0) },
		lightRaw: lightRaw(b, true),
	})
}
