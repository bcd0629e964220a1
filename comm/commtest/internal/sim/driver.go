package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Driver is the gpulib.Driver of one simulated device. It is safe for concurrent use;
// ncclGroupStart/End state is per driver (NCCL keeps it per thread).
type Driver struct {
	w   *World
	dev *device

	mu      sync.Mutex // guards the fields below; taken before World.mu, never after
	calls   map[string]int64
	total   int64
	submits int64
	fails   map[string][]error
}

var (
	_ gpulib.Driver     = (*Driver)(nil)
	_ gpulib.CommInfo   = (*Driver)(nil)
	_ gpulib.HostCopier = (*Driver)(nil)
)

// CallNames lists the C function behind every Driver method, the names Calls and
// FailCall take.
var CallNames = []string{
	"cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyDtoDAsync_v2",
	"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
	"cuStreamCreate", "cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamQuery",
	"cuEventCreate", "cuEventDestroy_v2", "cuEventRecord", "cuEventQuery",
	"cuStreamWaitEvent", "cuLaunchKernel", "cuDeviceGetAttribute", "cuStreamIsCapturing",
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig", "ncclCommGetAsyncError",
	"ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort", "ncclCommSplit", "ncclCommShrink",
	"ncclCommRevoke", "ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter",
	"ncclReduce", "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd", "ncclCommRegister",
	"ncclCommDeregister", "ncclMemAlloc", "ncclMemFree", "ncclCommWindowRegister",
	"ncclCommWindowDeregister", "ncclCommCount", "ncclCommUserRank",
	"ncclCommCuDevice", "ncclCommQueryProperties", "ncclDevCommCreate", "ncclDevCommDestroy",
	"ncclGetLsaDevicePointer", "ncclGetPeerDevicePointer", "ncclGetLsaMultimemDevicePointer",
	"ncclTeamWorld", "ncclTeamLsa", "ncclTeamRail", "ncclTeamRankToWorld", "ncclTeamRankToLsa",
	"ncclPutSignal", "ncclSignal", "ncclWaitSignal", "ncclWinGetUserPtr",
}

// Device returns the index of the driver's device.
func (d *Driver) Device() int { return d.dev.idx }

// Calls returns how many times the C function call was made through this driver
// (counting calls that failed).
func (d *Driver) Calls(call string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[call]
}

// TotalCalls returns the number of calls made through this driver.
func (d *Driver) TotalCalls() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// enter counts a call and returns the error it must fail with before doing anything:
// an injected failure, a closed world, a dead device, or (CUDA calls) a sticky fault.
func (d *Driver) enter(call string) error {
	d.mu.Lock()
	d.calls[call]++
	d.total++
	var injected error
	if q := d.fails[call]; len(q) > 0 {
		injected, d.fails[call] = q[0], q[1:]
	}
	d.mu.Unlock()
	if injected != nil {
		return injected
	}
	w := d.w
	w.mu.Lock()
	closed, dead, sticky := w.closed, d.dev.dead, d.dev.sticky
	w.mu.Unlock()
	nccl := strings.HasPrefix(call, "nccl")
	switch {
	case closed && nccl:
		return ncclErr(gpulib.SystemError, call, "simulator closed")
	case closed:
		return cudaErr(ErrorDeinitialized, call, "simulator closed")
	case dead && nccl:
		return ncclErr(gpulib.UnhandledCudaError, call, "device %d is dead (injected fault)", d.dev.idx)
	case dead:
		return cudaErr(ErrorDeviceUnavailable, call, "device %d is dead (injected fault)", d.dev.idx)
	case sticky != nil && !nccl:
		return cudaErr(stickyCode(sticky), call, "device %d faulted earlier: %v", d.dev.idx, sticky)
	}
	return nil
}

func stickyCode(err error) CUDAResult {
	if e, ok := err.(*CUDAError); ok {
		return e.Code
	}
	return ErrorLaunchFailed
}

// needs fails a call that the simulated NCCL version does not have.
func (d *Driver) needs(call string, since int) error {
	if d.w.version < since {
		return &MissingSymbolError{Symbol: call, Version: d.w.version, Since: since}
	}
	return nil
}

// locked is the prologue most calls share, then f holding World.mu: enter (the call is
// counted and may fail with an injected fault, a dead device or a closed simulator) and
// the version gate (since is the NCCL version that added the call; 0 for every
// version). A failed prologue returns T's zero value and its error; f is not run.
func locked[T any](d *Driver, call string, since int, f func(w *World) (T, error)) (T, error) {
	if err := d.enter(call); err != nil {
		var zero T
		return zero, err
	}
	if err := d.needs(call, since); err != nil {
		var zero T
		return zero, err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	return f(w)
}

// failCall queues err for the next times calls of call.
func (d *Driver) failCall(call string, err error, times int) error {
	if !slices.Contains(CallNames, call) {
		return fmt.Errorf("fail call: unknown function %q (see CallNames)", call)
	}
	if times < 1 {
		return fmt.Errorf("fail call %s: times %d: must be at least 1", call, times)
	}
	if err == nil {
		if strings.HasPrefix(call, "nccl") {
			err = &gpulib.Error{Code: gpulib.SystemError, Err: fmt.Errorf("%s: %w", call, ErrInjected)}
		} else {
			err = fmt.Errorf("%s: %w", call, ErrInjected)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for range times {
		d.fails[call] = append(d.fails[call], err)
	}
	return nil
}

// SetDevice makes the device current; in the simulation there is nothing to do.
func (d *Driver) SetDevice() error { return d.enter("cuCtxSetCurrent") }

// MemAlloc is cuMemAlloc_v2.
func (d *Driver) MemAlloc(bytes uint64) (gpulib.Ptr, error) {
	const call = "cuMemAlloc_v2"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if bytes == 0 {
		return 0, cudaErr(ErrorInvalidValue, call, "size 0")
	}
	if err := d.refuseAllocInCapture(call); err != nil {
		return 0, err
	}
	p, err := d.dev.alloc(bytes, false)
	if err != nil {
		return 0, cudaErr(ErrorOutOfMemory, call, "%v", err)
	}
	return p, nil
}

// MemFree is cuMemFree_v2.
func (d *Driver) MemFree(p gpulib.Ptr) error {
	const call = "cuMemFree_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.dev.free(p, false); err != nil {
		return cudaErr(ErrorInvalidValue, call, "%v", err)
	}
	return nil
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync_v2.
func (d *Driver) MemcpyDtoDAsync(dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	const call = "cuMemcpyDtoDAsync_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	return d.memcpy(call, dst, src, bytes, s)
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync_v2: src is copied at once (CUDA stages pageable
// memory) and written to dst when the stream reaches the copy.
func (d *Driver) MemcpyHtoDAsync(dst gpulib.Ptr, src []byte, s gpulib.Stream) error {
	const call = "cuMemcpyHtoDAsync_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	data := slices.Clone(src)
	dev := d.dev
	return d.onStream(call, s, dst, uint64(len(data)), func() error { return dev.write(dst, data) })
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync_v2: dst is written when the stream reaches the
// copy (read it after synchronizing the stream).
func (d *Driver) MemcpyDtoHAsync(dst []byte, src gpulib.Ptr, s gpulib.Stream) error {
	const call = "cuMemcpyDtoHAsync_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	dev := d.dev
	return d.onStream(call, s, src, uint64(len(dst)), func() error {
		b, err := dev.read(src, uint64(len(dst)))
		copy(dst, b)
		return err
	})
}

// onStream enqueues run, a copy touching bytes of device memory at p, on stream s.
func (d *Driver) onStream(call string, s gpulib.Stream, p gpulib.Ptr, bytes uint64, run func() error) error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	if bytes == 0 {
		return nil
	}
	if err := d.dev.check(p, bytes); err != nil {
		return cudaErr(ErrorInvalidValue, call, "device memory: %v", err)
	}
	w.enqueueLocked(st, call, func() error {
		if err := run(); err != nil {
			return cudaErr(ErrorIllegalAddress, call, "%v", err)
		}
		return nil
	})
	return nil
}

func (d *Driver) memcpy(call string, dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	if err := d.dev.check(src, bytes); err != nil {
		return cudaErr(ErrorInvalidValue, call, "source: %v", err)
	}
	if err := d.dev.check(dst, bytes); err != nil {
		return cudaErr(ErrorInvalidValue, call, "destination: %v", err)
	}
	dev := d.dev
	w.enqueueLocked(st, call, func() error {
		if err := dev.copyWithin(dst, src, bytes); err != nil {
			return cudaErr(ErrorIllegalAddress, call, "%v", err)
		}
		return nil
	})
	return nil
}

// StreamCreate is cuStreamCreate with CU_STREAM_NON_BLOCKING.
func (d *Driver) StreamCreate() (gpulib.Stream, error) {
	if err := d.enter("cuStreamCreate"); err != nil {
		return 0, err
	}
	return d.streamCreate(), nil
}

func (d *Driver) streamCreate() gpulib.Stream {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &stream{h: gpulib.Stream(w.handle()), dev: d.dev}
	w.streams[s.h] = s
	return s.h
}

// StreamDestroy is cuStreamDestroy_v2: work already queued still runs.
func (d *Driver) StreamDestroy(s gpulib.Stream) error {
	const call = "cuStreamDestroy_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	return d.streamDestroy(call, s)
}

func (d *Driver) streamDestroy(call string, s gpulib.Stream) error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if s == 0 {
		return cudaErr(ErrorInvalidHandle, call, "the legacy default stream cannot be destroyed")
	}
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	st.destroyed = true
	delete(w.streams, s)
	return nil
}

// StreamSynchronize is cuStreamSynchronize. It returns early with an error if the device
// stops (dies or the world closes).
func (d *Driver) StreamSynchronize(s gpulib.Stream) error {
	const call = "cuStreamSynchronize"
	if err := d.enter(call); err != nil {
		return err
	}
	return d.streamSync(call, s)
}

func (d *Driver) streamSync(call string, s gpulib.Stream) error {
	w := d.w
	w.mu.Lock()
	st, err := w.streamLocked(d.dev, s)
	var tail *op
	if err == nil {
		tail = st.tail
		if st.cap != nil {
			err = refuseInCaptureLocked(st.cap, call, "synchronize of a capturing stream")
			w.mu.Unlock()
			return err
		}
	}
	stop := d.dev.stop
	w.mu.Unlock()
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	waitOp(tail, stop)
	return d.stickyErr(call)
}

// stickyErr reports the state of the device after a wait: closed world, dead device or
// a fault of device code.
func (d *Driver) stickyErr(call string) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	switch {
	case d.w.closed:
		return cudaErr(ErrorDeinitialized, call, "simulator closed")
	case d.dev.dead:
		return cudaErr(ErrorDeviceUnavailable, call, "device %d is dead (injected fault)", d.dev.idx)
	}
	if s := d.dev.sticky; s != nil {
		return cudaErr(stickyCode(s), call, "device %d faulted: %v", d.dev.idx, s)
	}
	return nil
}

// StreamQuery is cuStreamQuery: true once all queued work has completed.
func (d *Driver) StreamQuery(s gpulib.Stream) (bool, error) {
	const call = "cuStreamQuery"
	if err := d.enter(call); err != nil {
		return false, err
	}
	w := d.w
	w.mu.Lock()
	st, err := w.streamLocked(d.dev, s)
	var tail *op
	if err == nil {
		tail = st.tail
		if st.cap != nil {
			err = refuseInCaptureLocked(st.cap, call, "query of a capturing stream")
			w.mu.Unlock()
			return false, err
		}
	}
	w.mu.Unlock()
	if err != nil {
		return false, cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	if err := d.stickyErr(call); err != nil {
		return false, err
	}
	return isDone(tail), nil
}

// EventCreate is cuEventCreate with CU_EVENT_DISABLE_TIMING.
func (d *Driver) EventCreate() (gpulib.Event, error) {
	if err := d.enter("cuEventCreate"); err != nil {
		return 0, err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	e := &event{h: gpulib.Event(w.handle()), dev: d.dev}
	w.events[e.h] = e
	return e.h, nil
}

// EventDestroy is cuEventDestroy_v2.
func (d *Driver) EventDestroy(e gpulib.Event) error {
	const call = "cuEventDestroy_v2"
	if err := d.enter(call); err != nil {
		return err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.eventLocked(d.dev, e); err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	delete(w.events, e)
	return nil
}

// EventRecord is cuEventRecord: the event completes when the work queued on s so far has.
func (d *Driver) EventRecord(e gpulib.Event, s gpulib.Stream) error {
	const call = "cuEventRecord"
	if err := d.enter(call); err != nil {
		return err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, err := w.eventLocked(d.dev, e)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	ev.target, ev.cap, ev.from = st.tail, st.cap, nil
	if st.cap != nil { // a node of the graph: nothing to wait for in real time
		ev.target, ev.from, ev.work = nil, st, st.cap.work[st]
	}
	return nil
}

// EventQuery is cuEventQuery: true if the captured work has completed (or the event was
// never recorded).
func (d *Driver) EventQuery(e gpulib.Event) (bool, error) {
	const call = "cuEventQuery"
	if err := d.enter(call); err != nil {
		return false, err
	}
	w := d.w
	w.mu.Lock()
	ev, err := w.eventLocked(d.dev, e)
	var target *op
	if err == nil {
		target = ev.target
		if ev.cap != nil {
			err = refuseInCaptureLocked(ev.cap, call, "query of an event recorded in the capture")
			w.mu.Unlock()
			return false, err
		}
	}
	w.mu.Unlock()
	if err != nil {
		return false, cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	return isDone(target), nil
}

// StreamWaitEvent is cuStreamWaitEvent: work queued on s later waits for the event's
// captured work.
func (d *Driver) StreamWaitEvent(s gpulib.Stream, e gpulib.Event) error {
	const call = "cuStreamWaitEvent"
	if err := d.enter(call); err != nil {
		return err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	ev, err := w.eventLocked(d.dev, e)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	switch {
	case ev.cap != nil && st.cap == nil: // fork: s joins the capture
		st.cap = ev.cap
		ev.cap.streams = append(ev.cap.streams, st)
		return nil
	case ev.cap != nil && st.cap != ev.cap:
		return cudaErr(ErrorStreamCaptureIsolation, call, "event %#x was recorded in another capture", uintptr(e))
	case ev.cap != nil: // ordered by the captured order; a join if from has no later work
		ev.cap.waitLocked(st, ev)
		return nil
	case st.cap != nil:
		st.cap.invalidateLocked(call + " of an event recorded outside the capture")
		return cudaErr(ErrorStreamCaptureIsolation, call, "capturing stream %#x waits for event %#x recorded outside the capture", uintptr(s), uintptr(e))
	}
	target, stop := ev.target, d.dev.stop
	if isDone(target) {
		return nil
	}
	w.enqueueLocked(st, call, func() error {
		waitOp(target, stop)
		return nil
	})
	return nil
}

// LaunchKernel is cuLaunchKernel of a kernel from World.LoadKernel.
func (d *Driver) LaunchKernel(f gpulib.Function, grid, block uint32, s gpulib.Stream, args gpulib.KernelArgs) error {
	const call = "cuLaunchKernel"
	if err := d.enter(call); err != nil {
		return err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	fn, ok := w.funcs[f]
	switch {
	case !ok:
		return cudaErr(ErrorInvalidHandle, call, "function %#x was not loaded", uintptr(f))
	case fn.dev != d.dev:
		return cudaErr(ErrorInvalidHandle, call, "function %#x (%s) was loaded on device %d, not device %d", uintptr(f), fn.name, fn.dev.idx, d.dev.idx)
	case grid == 0 || block == 0 || block > 1024:
		return cudaErr(ErrorInvalidValue, call, "%s: grid %d, block %d: need grid >= 1 and block in [1, 1024]", fn.name, grid, block)
	case args.N != fn.k.Args:
		return cudaErr(ErrorInvalidValue, call, "%s takes %d parameters, got %d", fn.name, fn.k.Args, args.N)
	}
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	a := slices.Clone(args.V[:args.N])
	mem, k, name := devMemory{d.dev}, fn.k, fn.name
	w.enqueueLocked(st, name, func() error {
		if err := k.Run(mem, a); err != nil {
			if _, ok := err.(*CUDAError); ok {
				return err
			}
			return cudaErr(ErrorLaunchFailed, call, "%s: %v", name, err)
		}
		return nil
	})
	return nil
}

// Multiprocessors is the SM count every simulated device reports (an A100's).
const Multiprocessors = 108

// MultiprocessorCount is cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT):
// Multiprocessors.
func (d *Driver) MultiprocessorCount() (int, error) {
	if err := d.enter("cuDeviceGetAttribute"); err != nil {
		return 0, err
	}
	return Multiprocessors, nil
}

// Version is ncclGetVersion.
func (d *Driver) Version() (int, error) {
	if err := d.enter("ncclGetVersion"); err != nil {
		return 0, err
	}
	return d.w.version, nil
}

// GetUniqueID is ncclGetUniqueId.
func (d *Driver) GetUniqueID() (gpulib.UniqueID, error) {
	if err := d.enter("ncclGetUniqueId"); err != nil {
		return gpulib.UniqueID{}, err
	}
	return d.w.getUniqueID(), nil
}

// CommInitRank is ncclCommInitRankConfig: blocking, it waits for every rank; otherwise
// the communicator reports InProgress until they have all arrived.
func (d *Driver) CommInitRank(nranks int, id gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommInitRankConfig"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.inGroup(call); err != nil {
		return 0, err
	}
	return d.w.commInitRank(d.dev, nranks, id, rank, cfg)
}

// CommGetAsyncError is ncclCommGetAsyncError.
func (d *Driver) CommGetAsyncError(c gpulib.Comm) (gpulib.Result, error) {
	if err := d.enter("ncclCommGetAsyncError"); err != nil {
		return 0, err
	}
	return d.w.commGetAsyncError(d.dev, c)
}

// LastError is ncclGetLastError(c): the simulator's account of the communicator's
// error (a mismatch between ranks, an injected fault), "" when it has none.
func (d *Driver) LastError(c gpulib.Comm) string { return d.w.lastError(d.dev, c) }

// CommFinalize is ncclCommFinalize.
func (d *Driver) CommFinalize(c gpulib.Comm) error {
	const call = "ncclCommFinalize"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.inGroup(call); err != nil {
		return err
	}
	return d.w.commFinalize(d.dev, c)
}

// CommDestroy is ncclCommDestroy: it waits for the communicator's pending work.
func (d *Driver) CommDestroy(c gpulib.Comm) error {
	if err := d.enter("ncclCommDestroy"); err != nil {
		return err
	}
	return d.w.commDestroy(d.dev, c)
}

// CommAbort is ncclCommAbort: it never waits.
func (d *Driver) CommAbort(c gpulib.Comm) error {
	if err := d.enter("ncclCommAbort"); err != nil {
		return err
	}
	return d.w.commAbort(d.dev, c)
}

// CommSplit is ncclCommSplit.
func (d *Driver) CommSplit(c gpulib.Comm, color, key int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommSplit"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceSplit); err != nil {
		return 0, err
	}
	if err := d.inGroup(call); err != nil {
		return 0, err
	}
	return d.w.commSplit(d.dev, c, color, key, cfg)
}

// CommShrink is ncclCommShrink.
func (d *Driver) CommShrink(c gpulib.Comm, exclude []int, cfg gpulib.Config, flags int) (gpulib.Comm, error) {
	const call = "ncclCommShrink"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceShrink); err != nil {
		return 0, err
	}
	if err := d.inGroup(call); err != nil {
		return 0, err
	}
	return d.w.commShrink(d.dev, c, exclude, cfg, flags)
}

// CommRevoke is ncclCommRevoke.
func (d *Driver) CommRevoke(c gpulib.Comm, flags int) error {
	const call = "ncclCommRevoke"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceRevoke); err != nil {
		return err
	}
	return d.w.commRevoke(d.dev, c, flags)
}

// AllReduce is ncclAllReduce.
func (d *Driver) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclAllReduce", send: send, recv: recv, count: count, dt: dt, op: op})
}

// Broadcast is ncclBroadcast.
func (d *Driver) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclBroadcast", send: send, recv: recv, count: count, dt: dt, root: root})
}

// AllGather is ncclAllGather.
func (d *Driver) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclAllGather", send: send, recv: recv, count: sendCount, dt: dt})
}

// ReduceScatter is ncclReduceScatter.
func (d *Driver) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclReduceScatter", send: send, recv: recv, count: recvCount, dt: dt, op: op})
}

// Reduce is ncclReduce.
func (d *Driver) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclReduce", send: send, recv: recv, count: count, dt: dt, op: op, root: root})
}

// AlltoAll is ncclAlltoAll (NCCL >= 2.28.3).
func (d *Driver) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclAlltoAll", send: send, recv: recv, count: count, dt: dt})
}

// Gather is ncclGather (NCCL >= 2.28.3).
func (d *Driver) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclGather", send: send, recv: recv, count: count, dt: dt, root: root})
}

// Scatter is ncclScatter (NCCL >= 2.28.3).
func (d *Driver) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return d.collective(c, s, &collDesc{call: "ncclScatter", send: send, recv: recv, count: count, dt: dt, root: root})
}

func (d *Driver) collective(c gpulib.Comm, s gpulib.Stream, desc *collDesc) error {
	if err := d.enter(desc.call); err != nil {
		return err
	}
	switch desc.call {
	case "ncclAlltoAll", "ncclGather", "ncclScatter":
		if err := d.needs(desc.call, sinceAlltoAll); err != nil {
			return err
		}
	}
	return d.communicate(desc.call, func() (*task, error) { return d.w.prepareCollLocked(d.dev, c, s, desc) })
}

// Send is ncclSend.
func (d *Driver) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return d.pointToPoint(c, s, &p2pDesc{send: true, buf: buf, count: count, dt: dt, peer: peer})
}

// Recv is ncclRecv.
func (d *Driver) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return d.pointToPoint(c, s, &p2pDesc{buf: buf, count: count, dt: dt, peer: peer})
}

func (d *Driver) pointToPoint(c gpulib.Comm, s gpulib.Stream, p *p2pDesc) error {
	if err := d.enter(p.call()); err != nil {
		return err
	}
	return d.communicate(p.call(), func() (*task, error) { return d.w.prepareP2PLocked(d.dev, c, s, p) })
}

// GroupStart is ncclGroupStart.
func (d *Driver) GroupStart() error {
	if err := d.enter("ncclGroupStart"); err != nil {
		return err
	}
	return d.groupStart()
}

// GroupEnd is ncclGroupEnd: the group's operations are launched together.
func (d *Driver) GroupEnd() error {
	if err := d.enter("ncclGroupEnd"); err != nil {
		return err
	}
	return d.groupEnd()
}

// Submit makes a recorded group as NCCL makes the same calls one by one on the calling
// thread: ncclGroupStart, each call through the driver of its communicator's device (a
// group may span the communicators of several devices; an unknown communicator's call
// goes through d, which rejects it), ncclGroupEnd. Each call is counted as itself
// (Calls), the submission once (Submits).
func (d *Driver) Submit(calls []gpulib.Call) (int, error) {
	d.mu.Lock()
	d.submits++
	d.mu.Unlock()
	return gpulib.SubmitEach(d, calls, d.driverOf)
}

// driverOf returns the driver of the device c's communicator lives on, d if unknown.
func (d *Driver) driverOf(c *gpulib.Call) gpulib.Driver {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if rc, ok := w.comms[c.Comm]; ok && rc.dev != nil && rc.dev.idx < len(w.drivers) {
		return w.drivers[rc.dev.idx]
	}
	return d
}

// Submits returns how many groups were submitted through this driver (Submit).
func (d *Driver) Submits() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.submits
}

// CommRegister is ncclCommRegister.
func (d *Driver) CommRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64) (gpulib.Handle, error) {
	const call = "ncclCommRegister"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceMemAlloc); err != nil {
		return 0, err
	}
	return d.w.commRegister(d.dev, c, buf, bytes)
}

// CommDeregister is ncclCommDeregister.
func (d *Driver) CommDeregister(c gpulib.Comm, h gpulib.Handle) error {
	const call = "ncclCommDeregister"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceMemAlloc); err != nil {
		return err
	}
	return d.w.commDeregister(d.dev, c, h)
}

// CommCount is ncclCommCount (gpulib.CommInfo).
func (d *Driver) CommCount(c gpulib.Comm) (int, error) {
	if err := d.enter("ncclCommCount"); err != nil {
		return 0, err
	}
	n, _, err := d.w.commInfo(d.dev, c, "ncclCommCount")
	return n, err
}

// CommUserRank is ncclCommUserRank (gpulib.CommInfo).
func (d *Driver) CommUserRank(c gpulib.Comm) (int, error) {
	if err := d.enter("ncclCommUserRank"); err != nil {
		return 0, err
	}
	_, r, err := d.w.commInfo(d.dev, c, "ncclCommUserRank")
	return r, err
}

// MemAllocNCCL is ncclMemAlloc.
func (d *Driver) MemAllocNCCL(bytes uint64) (gpulib.Ptr, error) {
	const call = "ncclMemAlloc"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceMemAlloc); err != nil {
		return 0, err
	}
	if bytes == 0 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "size 0")
	}
	if err := d.refuseAllocInCapture("cuMemCreate"); err != nil { // NCCL's cuMem* calls fail
		return 0, ncclErr(gpulib.UnhandledCudaError, call, "%v", err)
	}
	p, err := d.dev.alloc(bytes, true)
	if err != nil {
		return 0, ncclErr(gpulib.UnhandledCudaError, call, "%v", err)
	}
	return p, nil
}

// MemFreeNCCL is ncclMemFree; a null pointer is a no-op.
func (d *Driver) MemFreeNCCL(p gpulib.Ptr) error {
	const call = "ncclMemFree"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceMemAlloc); err != nil {
		return err
	}
	if p == 0 {
		return nil
	}
	if err := d.dev.free(p, true); err != nil {
		return ncclErr(gpulib.InvalidArgument, call, "%v", err)
	}
	return nil
}

// CommWindowRegister is ncclCommWindowRegister, a collective call.
func (d *Driver) CommWindowRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64, flags int) (gpulib.Handle, error) {
	const call = "ncclCommWindowRegister"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceWindow); err != nil {
		return 0, err
	}
	if err := d.inGroup(call); err != nil {
		return 0, err
	}
	return d.w.commWindowRegister(d.dev, c, buf, bytes, flags)
}

// CommWindowDeregister is ncclCommWindowDeregister (local).
func (d *Driver) CommWindowDeregister(c gpulib.Comm, h gpulib.Handle) error {
	const call = "ncclCommWindowDeregister"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceWindow); err != nil {
		return err
	}
	return d.w.commWindowDeregister(d.dev, c, h)
}

// Library is gpulib.Library's: the drivers of one World make their calls into one
// simulated NCCL, those of two Worlds into two.
func (d *Driver) Library() any { return d.w }
