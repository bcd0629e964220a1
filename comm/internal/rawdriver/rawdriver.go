// Package rawdriver is the production gpulib.Driver: comm's NCCL backend calling the real
// libcuda and libnccl through raw/cuda and raw/nccl (loaded at run time, no -lnccl). It
// builds with CGO_ENABLED=0, where every call fails with the raw packages' ErrNeedsCgo.
//
// NCCL failures are returned as *gpulib.Error carrying raw's *nccl.Error (so errors.As
// reaches both); CUDA failures as raw's cuda.Result. The success paths allocate nothing.
package rawdriver

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Driver drives one CUDA device (its primary context) and the NCCL communicators of the
// rank that uses it.
type Driver struct {
	ordinal int
	dev     cuda.Device
	ctx     cuda.Context

	launchMu sync.Mutex
	launch   *launchArgs // made by the first LaunchKernel, reused (pinned) by every call
}

// launchArgs is cuLaunchKernel's parameter array: pointers to the values.
type launchArgs struct {
	v      [4]uint64
	params [4]unsafe.Pointer
}

var _ gpulib.Driver = (*Driver)(nil)
var _ gpulib.CommInfo = (*Driver)(nil)
var _ gpulib.HostCopier = (*Driver)(nil)

var initOnce = sync.OnceValue(func() error { return cuda.Init(0) })

// New initialises CUDA and retains the primary context of device ordinal; a negative
// ordinal picks rank modulo the number of visible devices.
func New(ordinal, rank int) (*Driver, error) {
	if err := initOnce(); err != nil {
		return nil, fmt.Errorf("cuInit: %w", err)
	}
	if ordinal < 0 {
		var n int32
		if err := cuda.DeviceGetCount(&n); err != nil {
			return nil, fmt.Errorf("cuDeviceGetCount: %w", err)
		}
		if n < 1 {
			return nil, fmt.Errorf("cuDeviceGetCount: no CUDA device visible")
		}
		ordinal = rank % int(n)
	}
	d := &Driver{ordinal: ordinal}
	if err := cuda.DeviceGet(&d.dev, int32(ordinal)); err != nil {
		return nil, fmt.Errorf("cuDeviceGet(%d): %w", ordinal, err)
	}
	if err := cuda.DevicePrimaryCtxRetain(&d.ctx, d.dev); err != nil {
		return nil, fmt.Errorf("cuDevicePrimaryCtxRetain(device %d): %w", ordinal, err)
	}
	return d, nil
}

// UniqueID calls ncclGetUniqueId; it needs no device.
func UniqueID() (gpulib.UniqueID, error) {
	var id nccl.UniqueId
	if err := nccl.GetUniqueId(&id); err != nil {
		return gpulib.UniqueID{}, ncclErr(err)
	}
	return gpulib.UniqueID(id.Internal), nil
}

// Ordinal is the device the driver uses.
func (d *Driver) Ordinal() int { return d.ordinal }

// ncclErr turns raw's NCCL error into a *gpulib.Error; load and symbol errors stay as
// they are.
func ncclErr(err error) error {
	if err == nil {
		return nil
	}
	var r nccl.Result
	if errors.As(err, &r) {
		return &gpulib.Error{Code: r, Err: err}
	}
	return err
}

// ptr gives C a device address. Device addresses lie in the unified address space that
// CUDA reserves in the process, never in Go's heap.
func ptr(p gpulib.Ptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// handle gives C back an opaque NCCL handle.
func handle(h gpulib.Handle) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

// SetDevice makes the device's primary context current on the calling thread.
func (d *Driver) SetDevice() error { return cuda.CtxSetCurrent(d.ctx) }

// MemAlloc is cuMemAlloc_v2.
func (d *Driver) MemAlloc(bytes uint64) (gpulib.Ptr, error) {
	var p cuda.Deviceptr
	if err := cuda.MemAlloc(&p, bytes); err != nil {
		return 0, err
	}
	return gpulib.Ptr(p), nil
}

// MemFree is cuMemFree_v2.
func (d *Driver) MemFree(p gpulib.Ptr) error { return cuda.MemFree(cuda.Deviceptr(p)) }

// MemcpyDtoDAsync is cuMemcpyDtoDAsync_v2.
func (d *Driver) MemcpyDtoDAsync(dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	return cuda.MemcpyDtoDAsync(cuda.Deviceptr(dst), cuda.Deviceptr(src), bytes, cuda.Stream(s))
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync_v2 (gpulib.HostCopier). For pageable memory
// CUDA stages src before returning, so C keeps no Go pointer.
func (d *Driver) MemcpyHtoDAsync(dst gpulib.Ptr, src []byte, s gpulib.Stream) error {
	if len(src) == 0 {
		return nil
	}
	return cuda.MemcpyHtoDAsync(cuda.Deviceptr(dst), unsafe.Pointer(&src[0]), uint64(len(src)), cuda.Stream(s))
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync_v2 (gpulib.HostCopier). Into pageable memory
// CUDA returns only once the copy is done, so C keeps no Go pointer.
func (d *Driver) MemcpyDtoHAsync(dst []byte, src gpulib.Ptr, s gpulib.Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return cuda.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), cuda.Deviceptr(src), uint64(len(dst)), cuda.Stream(s))
}

// StreamCreate is cuStreamCreate with CU_STREAM_NON_BLOCKING.
func (d *Driver) StreamCreate() (gpulib.Stream, error) {
	var s cuda.Stream
	if err := cuda.StreamCreate(&s, uint32(cuda.StreamNonBlocking)); err != nil {
		return 0, err
	}
	return gpulib.Stream(s), nil
}

// StreamDestroy is cuStreamDestroy_v2.
func (d *Driver) StreamDestroy(s gpulib.Stream) error { return cuda.StreamDestroy(cuda.Stream(s)) }

// StreamSynchronize is cuStreamSynchronize.
func (d *Driver) StreamSynchronize(s gpulib.Stream) error {
	return cuda.StreamSynchronize(cuda.Stream(s))
}

// StreamIsCapturing is cuStreamIsCapturing: any status but
// CU_STREAM_CAPTURE_STATUS_NONE (active, or invalidated) is capturing.
func (d *Driver) StreamIsCapturing(s gpulib.Stream) (bool, error) {
	var st cuda.StreamCaptureStatus
	if err := cuda.StreamIsCapturing(cuda.Stream(s), &st); err != nil {
		return false, err
	}
	return st != cuda.StreamCaptureStatusNone, nil
}

// StreamQuery is cuStreamQuery; CUDA_ERROR_NOT_READY is (false, nil).
func (d *Driver) StreamQuery(s gpulib.Stream) (bool, error) {
	switch err := cuda.StreamQuery(cuda.Stream(s)); {
	case err == nil:
		return true, nil
	case errors.Is(err, cuda.ErrorNotReady):
		return false, nil
	default:
		return false, err
	}
}

// EventCreate is cuEventCreate with CU_EVENT_DISABLE_TIMING.
func (d *Driver) EventCreate() (gpulib.Event, error) {
	var e cuda.Event
	if err := cuda.EventCreate(&e, uint32(cuda.EventDisableTiming)); err != nil {
		return 0, err
	}
	return gpulib.Event(e), nil
}

// EventDestroy is cuEventDestroy_v2.
func (d *Driver) EventDestroy(e gpulib.Event) error { return cuda.EventDestroy(cuda.Event(e)) }

// EventRecord is cuEventRecord.
func (d *Driver) EventRecord(e gpulib.Event, s gpulib.Stream) error {
	return cuda.EventRecord(cuda.Event(e), cuda.Stream(s))
}

// EventQuery is cuEventQuery; CUDA_ERROR_NOT_READY is (false, nil).
func (d *Driver) EventQuery(e gpulib.Event) (bool, error) {
	switch err := cuda.EventQuery(cuda.Event(e)); {
	case err == nil:
		return true, nil
	case errors.Is(err, cuda.ErrorNotReady):
		return false, nil
	default:
		return false, err
	}
}

// StreamWaitEvent is cuStreamWaitEvent.
func (d *Driver) StreamWaitEvent(s gpulib.Stream, e gpulib.Event) error {
	return cuda.StreamWaitEvent(cuda.Stream(s), cuda.Event(e), 0)
}

// LaunchKernel is cuLaunchKernel with a one-dimensional grid and block, no shared
// memory, and args.N 8-byte parameters.
func (d *Driver) LaunchKernel(f gpulib.Function, grid, block uint32, s gpulib.Stream, args gpulib.KernelArgs) error {
	if args.N < 0 || args.N > len(args.V) {
		return fmt.Errorf("launch kernel: %d arguments, at most %d", args.N, len(args.V))
	}
	// The parameter array holds pointers to the values; both live in Go memory pinned
	// for the call (cuLaunchKernel copies the values before it returns). One array per
	// driver, so that a launch allocates nothing.
	d.launchMu.Lock()
	defer d.launchMu.Unlock()
	if d.launch == nil {
		d.launch = new(launchArgs)
	}
	l := d.launch
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(l)
	l.v = args.V
	for i := range args.N {
		l.params[i] = unsafe.Pointer(&l.v[i])
	}
	var params *unsafe.Pointer
	if args.N > 0 {
		params = &l.params[0]
	}
	return cuda.LaunchKernel(cuda.Function(f), grid, 1, 1, block, 1, 1, 0, cuda.Stream(s), params, nil)
}

// MultiprocessorCount is cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
// of the driver's device.
func (d *Driver) MultiprocessorCount() (int, error) {
	var n int32
	if err := cuda.DeviceGetAttribute(&n, cuda.DeviceAttributeMultiprocessorCount, d.dev); err != nil {
		return 0, fmt.Errorf("cuDeviceGetAttribute(multiprocessor count, device %d): %w", d.ordinal, err)
	}
	return int(n), nil
}

// Version is ncclGetVersion.
func (d *Driver) Version() (int, error) {
	v, err := nccl.LoadedVersion()
	return v, ncclErr(err)
}

// GetUniqueID is ncclGetUniqueId.
func (d *Driver) GetUniqueID() (gpulib.UniqueID, error) { return UniqueID() }

// config builds an ncclConfig_t from NCCL_CONFIG_INITIALIZER; the name, if any, is
// pinned until the call returns (NCCL copies it).
func config(cfg gpulib.Config, pin *runtime.Pinner) *nccl.Config {
	c := nccl.NewConfig()
	c.Blocking = 0
	if cfg.Blocking {
		c.Blocking = 1
	}
	if cfg.Name != "" {
		name := append([]byte(cfg.Name), 0)
		pin.Pin(&name[0])
		c.CommName = &name[0]
	}
	setConfig(&c, cfg, pin)
	return &c
}

// CommInitRank is ncclCommInitRankConfig.
func (d *Driver) CommInitRank(nranks int, id gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	var c nccl.Comm
	err := nccl.CommInitRankConfig(&c, int32(nranks), nccl.UniqueId{Internal: id}, int32(rank), config(cfg, &pin))
	return gpulib.Comm(c), ncclErr(err)
}

// CommGetAsyncError is ncclCommGetAsyncError.
func (d *Driver) CommGetAsyncError(c gpulib.Comm) (gpulib.Result, error) {
	var r nccl.Result
	if err := nccl.CommGetAsyncError(nccl.Comm(c), &r); err != nil {
		return 0, ncclErr(err)
	}
	return r, nil
}

// LastError is ncclGetLastError(c).
func (d *Driver) LastError(c gpulib.Comm) string {
	s, err := nccl.GetLastError(nccl.Comm(c))
	if err != nil {
		return ""
	}
	return s
}

// CommFinalize is ncclCommFinalize.
func (d *Driver) CommFinalize(c gpulib.Comm) error { return ncclErr(nccl.CommFinalize(nccl.Comm(c))) }

// CommDestroy is ncclCommDestroy.
func (d *Driver) CommDestroy(c gpulib.Comm) error { return ncclErr(nccl.CommDestroy(nccl.Comm(c))) }

// CommAbort is ncclCommAbort.
func (d *Driver) CommAbort(c gpulib.Comm) error { return ncclErr(nccl.CommAbort(nccl.Comm(c))) }

// newComm is an ncclComm_t that NCCL may fill after the call returns (non-blocking
// split and shrink); it stays pinned until then.
type newComm struct {
	pin runtime.Pinner
	c   *nccl.Comm
}

func newNewComm() *newComm {
	n := &newComm{c: new(nccl.Comm)}
	n.pin.Pin(n.c)
	return n
}

// await returns the child once the parent has left ncclInProgress (NCCL fills the child
// then), polling the parent's asynchronous state.
func (d *Driver) await(parent gpulib.Comm, n *newComm, err error) (gpulib.Comm, error) {
	defer n.pin.Unpin()
	if err != nil && !errors.Is(err, nccl.InProgress) {
		return 0, ncclErr(err)
	}
	for i := 0; ; i++ {
		res, qerr := d.CommGetAsyncError(parent)
		if qerr != nil {
			return 0, qerr
		}
		if res != gpulib.InProgress {
			if res != gpulib.Success {
				return 0, &gpulib.Error{Code: res}
			}
			return gpulib.Comm(*n.c), nil
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// CommSplit is ncclCommSplit. On a non-blocking parent it waits until the parent is
// back to success, which is when NCCL writes the child.
func (d *Driver) CommSplit(c gpulib.Comm, color, key int, cfg gpulib.Config) (gpulib.Comm, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	n := newNewComm()
	err := nccl.CommSplit(nccl.Comm(c), int32(color), int32(key), n.c, config(cfg, &pin))
	return d.await(c, n, err)
}

// CommShrink is ncclCommShrink; like CommSplit it waits for the child.
func (d *Driver) CommShrink(c gpulib.Comm, exclude []int, cfg gpulib.Config, flags int) (gpulib.Comm, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	ranks := make([]int32, len(exclude))
	for i, r := range exclude {
		ranks[i] = int32(r)
	}
	var first *int32
	if len(ranks) > 0 {
		first = &ranks[0]
	}
	n := newNewComm()
	err := nccl.CommShrink(nccl.Comm(c), first, int32(len(ranks)), n.c, config(cfg, &pin), int32(flags))
	return d.await(c, n, err)
}

// CommRevoke is ncclCommRevoke.
func (d *Driver) CommRevoke(c gpulib.Comm, flags int) error {
	return ncclErr(nccl.CommRevoke(nccl.Comm(c), int32(flags)))
}

// CommCount is ncclCommCount.
func (d *Driver) CommCount(c gpulib.Comm) (int, error) {
	var n int32
	err := nccl.CommCount(nccl.Comm(c), &n)
	return int(n), ncclErr(err)
}

// CommUserRank is ncclCommUserRank.
func (d *Driver) CommUserRank(c gpulib.Comm) (int, error) {
	var r int32
	err := nccl.CommUserRank(nccl.Comm(c), &r)
	return int(r), ncclErr(err)
}

// AllReduce is ncclAllReduce.
func (d *Driver) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.AllReduce(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.RedOp(op), nccl.Comm(c), nccl.CudaStream(s)))
}

// Broadcast is ncclBroadcast.
func (d *Driver) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Broadcast(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s)))
}

// AllGather is ncclAllGather.
func (d *Driver) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.AllGather(ptr(send), ptr(recv), sendCount, nccl.DataType(dt), nccl.Comm(c), nccl.CudaStream(s)))
}

// ReduceScatter is ncclReduceScatter.
func (d *Driver) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.ReduceScatter(ptr(send), ptr(recv), recvCount, nccl.DataType(dt), nccl.RedOp(op), nccl.Comm(c), nccl.CudaStream(s)))
}

// Send is ncclSend.
func (d *Driver) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Send(ptr(buf), count, nccl.DataType(dt), int32(peer), nccl.Comm(c), nccl.CudaStream(s)))
}

// Recv is ncclRecv.
func (d *Driver) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return ncclErr(nccl.Recv(ptr(buf), count, nccl.DataType(dt), int32(peer), nccl.Comm(c), nccl.CudaStream(s)))
}

// GroupStart is ncclGroupStart.
func (d *Driver) GroupStart() error { return ncclErr(nccl.GroupStart()) }

// GroupEnd is ncclGroupEnd.
func (d *Driver) GroupEnd() error { return ncclErr(nccl.GroupEnd()) }

// CommRegister is ncclCommRegister.
func (d *Driver) CommRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64) (gpulib.Handle, error) {
	var h unsafe.Pointer
	if err := nccl.CommRegister(nccl.Comm(c), ptr(buf), bytes, &h); err != nil {
		return 0, ncclErr(err)
	}
	return gpulib.Handle(uintptr(h)), nil
}

// CommDeregister is ncclCommDeregister.
func (d *Driver) CommDeregister(c gpulib.Comm, h gpulib.Handle) error {
	return ncclErr(nccl.CommDeregister(nccl.Comm(c), handle(h)))
}

// MemAllocNCCL is ncclMemAlloc.
func (d *Driver) MemAllocNCCL(bytes uint64) (gpulib.Ptr, error) {
	var p unsafe.Pointer
	if err := nccl.MemAlloc(&p, bytes); err != nil {
		return 0, ncclErr(err)
	}
	return gpulib.Ptr(uintptr(p)), nil
}

// MemFreeNCCL is ncclMemFree.
func (d *Driver) MemFreeNCCL(p gpulib.Ptr) error { return ncclErr(nccl.MemFree(ptr(p))) }

// CommWindowRegister is ncclCommWindowRegister.
func (d *Driver) CommWindowRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64, flags int) (gpulib.Handle, error) {
	var w nccl.Window
	if err := nccl.CommWindowRegister(nccl.Comm(c), ptr(buf), bytes, &w, int32(flags)); err != nil {
		return 0, ncclErr(err)
	}
	return gpulib.Handle(w), nil
}

// CommWindowDeregister is ncclCommWindowDeregister.
func (d *Driver) CommWindowDeregister(c gpulib.Comm, w gpulib.Handle) error {
	return ncclErr(nccl.CommWindowDeregister(nccl.Comm(c), nccl.Window(w)))
}

// library names the process's loaded libnccl, the one every raw Driver calls.
var library = new(int)

// Library is gpulib.Library's: every raw Driver calls the one loaded libnccl.
func (d *Driver) Library() any { return library }
