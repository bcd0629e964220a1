package rawdriver

import (
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

var _ gpulib.OneSided = (*Driver)(nil)

// PutSignal is ncclPutSignal.
func (d *Driver) PutSignal(local gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, win gpulib.Handle, offset uint64, sigIdx, ctx int, flags uint32, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.PutSignal(ptr(local), count, nccl.DataType(dt), int32(peer), nccl.Window(win), offset,
		int32(sigIdx), int32(ctx), flags, nccl.Comm(c), nccl.CudaStream(s)))
}

// Signal is ncclSignal.
func (d *Driver) Signal(peer, sigIdx, ctx int, flags uint32, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Signal(int32(peer), int32(sigIdx), int32(ctx), flags, nccl.Comm(c), nccl.CudaStream(s)))
}

// WaitSignal is ncclWaitSignal. descs is Go memory that NCCL reads during the call only
// (it copies the descriptors into its task), passed under cgo's pointer rules.
func (d *Driver) WaitSignal(descs []gpulib.SignalDesc, c gpulib.Comm, s gpulib.Stream) error {
	var first *nccl.WaitSignalDesc
	if len(descs) > 0 {
		first = &descs[0]
	}
	return ncclErr(nccl.WaitSignal(int32(len(descs)), first, nccl.Comm(c), nccl.CudaStream(s)))
}

// WinGetUserPtr is ncclWinGetUserPtr.
func (d *Driver) WinGetUserPtr(c gpulib.Comm, win gpulib.Handle) (gpulib.Ptr, error) {
	var p unsafe.Pointer
	if err := nccl.WinGetUserPtr(nccl.Comm(c), nccl.Window(win), &p); err != nil {
		return 0, ncclErr(err)
	}
	return gpulib.Ptr(uintptr(p)), nil
}
