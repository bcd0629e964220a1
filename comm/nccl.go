package comm

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// NCCL is the Backend over one rank of an NCCL communicator, built on an
// [NCCLCommunicator] (see Communicator for the typed API on the same communicator).
//
// Semantics, per operation:
//   - AllReduce, AllGather, ReduceScatter, Broadcast enqueue on the communication stream
//     and wait for completion (within the operation timeout, checking
//     ncclCommGetAsyncError); inside a group they only enqueue and the outermost
//     GroupEnd waits. AllReduce is in place; reductions sum the element type.
//   - Barrier enqueues a zero-count all-reduce and does not wait.
//   - SendTo and RecvFrom enqueue on the caller's stream and do not wait.
//   - AllReduceAsync orders the reduction after the work queued on the compute stream
//     and later compute work after it, with two events; the host never waits.
//   - RecvCommandU32 broadcasts 4 bytes from root and waits as long as ctx allows,
//     returning the first transport error NCCL reports.
//   - RegisterBuffer uses ncclCommRegister; SymmetricAlloc uses ncclMemAlloc (NCCL >=
//     2.19) and, with NCCL >= 2.27, registers the buffer as a symmetric window
//     (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC): then it is a collective
//     call, and every rank must allocate the same sizes in the same order.
//   - IsHealthy is false after a fatal NCCL error or a completion timeout.
//   - AttemptReconnect needs WithReconnect (Connect and Job.NewNCCL set it: a
//     rendezvous in the job's next generation): it aborts the communicator and
//     initialises the next generation from the id the ReconnectFunc returns.
//   - SetAddKernel takes the in-place add kernel for the backend's element type
//     (package kernels: BF16 for BFloat16, F16 for Float16, F32 for Float32). With two
//     ranks, AllReduce and AllReduceAsync of 1 to WithTwoRankThreshold bytes outside a
//     group then exchange the buffers with ncclSend/ncclRecv in one group and add the
//     peer's data with the kernel, on the communication stream; the result is the
//     ncclAllReduce result bit for bit. comm cannot inspect a CUfunction: a kernel for
//     another element type computes garbage. Element types without an add kernel
//     ignore it. Every rank must set the kernel at the same point of its call
//     sequence; the scratch buffer the peer's data lands in grows on demand, is
//     registered with ncclCommRegister and freed on Close. See DefaultTwoRankThreshold.
type NCCL struct {
	c    *NCCLCommunicator
	elem DType
	size int

	addKernel atomic.Uintptr
	two       twoRank

	regMu      sync.Mutex
	regs       map[BufferHandle]seam.Handle
	nextHandle BufferHandle
	windows    map[DevicePtr]window
	nextWindow int
	generation int
}

// window is a symmetric allocation: its NCCL window (0 when NCCL has none) and its
// allocation order.
type window struct {
	h     seam.Handle
	bytes int
	seq   int
}

var _ Backend = (*NCCL)(nil)

func (*NCCL) checked() {}

// NewNCCL creates rank's Backend of a world-rank NCCL communicator from id (created by
// one rank with NewUniqueID and shared with the others), loading NCCL and CUDA at run
// time. Initialisation is non-blocking and waits for the other ranks as long as ctx and
// the operation timeout allow. Options: WithElementType, WithDevice, WithTimeout,
// WithCloseTimeout, WithLogger, WithName, WithReconnect, WithPollInterval,
// WithTwoRankThreshold.
func NewNCCL(ctx context.Context, id UniqueID, rank, world int, opts ...Option) (*NCCL, error) {
	cfg := newConfig(opts)
	if err := checkWorld(opInit, rank, world, cfg.elem); err != nil {
		return nil, err
	}
	if err := checkTwoRankThreshold(rank, cfg.twoRankMax); err != nil {
		return nil, err
	}
	d, err := productionDriver(cfg.device, rank)
	if err != nil {
		return nil, &OpError{Op: opInit, Bytes: -1, Rank: rank, Err: err}
	}
	return newNCCL(ctx, d, id, rank, world, cfg)
}

// NewUniqueID creates a new NCCL unique id (ncclGetUniqueId) for NewNCCL. One rank
// creates it and shares it with the others.
func NewUniqueID() (UniqueID, error) {
	id, err := productionUniqueID()
	if err != nil {
		return UniqueID{}, fmt.Errorf("get-unique-id: %w", err)
	}
	return UniqueID(id), nil
}

func init() {
	seam.NewNCCL = func(ctx context.Context, d seam.Driver, id seam.UniqueID, rank, world int, opts any) (any, error) {
		var o []Option
		switch v := opts.(type) {
		case nil:
		case []Option:
			o = v
		case Option:
			o = []Option{v}
		default:
			return nil, fmt.Errorf("new-nccl: options of type %T, want []comm.Option", opts)
		}
		b, err := newNCCL(ctx, d, UniqueID(id), rank, world, newConfig(o))
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

func newNCCL(ctx context.Context, d seam.Driver, id UniqueID, rank, world int, cfg config) (*NCCL, error) {
	if err := checkTwoRankThreshold(rank, cfg.twoRankMax); err != nil {
		return nil, err
	}
	c, err := newNCCLCommunicator(ctx, d, id, rank, world, cfg)
	if err != nil {
		return nil, err
	}
	b := &NCCL{c: c, elem: cfg.elem, size: cfg.elem.Size()}
	c.onClose = b.release
	return b, nil
}

// Communicator returns the typed API on the same communicator. Closing either closes
// both.
func (b *NCCL) Communicator() *NCCLCommunicator { return b.c }

// ElementType is the element type the backend reduces.
func (b *NCCL) ElementType() DType { return b.elem }

// finish completes a blocking collective: the enqueue's result, then (outside a group)
// the wait for completion.
func (b *NCCL) finish(op string, bytes int, grouped bool, err error) error {
	if err := b.c.result(op, bytes, err); err != nil {
		return err
	}
	if grouped {
		return nil
	}
	return b.c.wait(context.Background(), op, bytes, bounded)
}

// enter takes the communicator for an operation: held shared, usable, and whether a
// group is open. On success the caller must RUnlock c.life.
func (b *NCCL) enter(op string, bytes int) (grouped bool, err error) {
	c := b.c
	c.life.RLock()
	if err := c.usable(op, bytes); err != nil {
		c.life.RUnlock()
		return false, err
	}
	grouped, err = c.inGroup(op)
	if err != nil {
		c.life.RUnlock()
		return false, err
	}
	return grouped, nil
}

// AllReduce sums bytes at ptr in place across ranks (ncclAllReduce of the element type,
// or the two-rank path: see the type's documentation) and waits for the result.
func (b *NCCL) AllReduce(ptr DevicePtr, bytes int) error {
	c := b.c
	if err := c.g.reduce(opAllReduce, ptr, bytes); err != nil {
		return err
	}
	grouped, err := b.enter(opAllReduce, bytes)
	if err != nil {
		return err
	}
	defer c.life.RUnlock()
	p := c.buf(ptr)
	f, err := b.twoRankKernel(opAllReduce, ptr, bytes, grouped)
	if err != nil {
		return err
	}
	if f != 0 {
		return b.twoRankAllReduce(f, p, bytes)
	}
	c.mu.Lock()
	err = c.d.AllReduce(p, p, uint64(bytes/b.size), seam.DataType(b.elem), seam.Sum, c.comm, c.stream)
	c.groupWait = c.groupWait || grouped
	c.mu.Unlock()
	return b.finish(opAllReduce, bytes, grouped, err)
}

// AllGather gathers bytes from every rank into recv in rank order and waits.
func (b *NCCL) AllGather(send, recv DevicePtr, bytes int) error {
	c := b.c
	if err := c.g.gather(opAllGather, send, recv, bytes, false); err != nil {
		return err
	}
	grouped, err := b.enter(opAllGather, bytes)
	if err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	err = c.d.AllGather(c.buf(send), c.buf(recv), uint64(bytes), seam.Uint8, c.comm, c.stream)
	c.groupWait = c.groupWait || grouped
	c.mu.Unlock()
	return b.finish(opAllGather, bytes, grouped, err)
}

// ReduceScatter sums across ranks (elements of the element type) and leaves this rank's
// bytes-sized share at recv, then waits.
func (b *NCCL) ReduceScatter(send, recv DevicePtr, bytes int) error {
	c := b.c
	if err := c.g.gather(opReduceScatter, send, recv, bytes, true); err != nil {
		return err
	}
	grouped, err := b.enter(opReduceScatter, bytes)
	if err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	err = c.d.ReduceScatter(c.buf(send), c.buf(recv), uint64(bytes/b.size), seam.DataType(b.elem), seam.Sum, c.comm, c.stream)
	c.groupWait = c.groupWait || grouped
	c.mu.Unlock()
	return b.finish(opReduceScatter, bytes, grouped, err)
}

// Broadcast copies bytes at ptr on root to every rank, in place, and waits.
func (b *NCCL) Broadcast(ptr DevicePtr, bytes, root int) error {
	c := b.c
	if err := c.g.broadcast(ptr, bytes, root); err != nil {
		return err
	}
	grouped, err := b.enter(opBroadcast, bytes)
	if err != nil {
		return err
	}
	defer c.life.RUnlock()
	p := c.buf(ptr)
	c.mu.Lock()
	err = c.d.Broadcast(p, p, uint64(bytes), seam.Uint8, root, c.comm, c.stream)
	c.groupWait = c.groupWait || grouped
	c.mu.Unlock()
	return b.finish(opBroadcast, bytes, grouped, err)
}

// Barrier enqueues a zero-count all-reduce on the communication stream and returns
// without waiting (the seed's barrier). NCCL treats a zero-count collective as complete
// at once, so it synchronises nothing; use Communicator().Barrier for a real barrier.
func (b *NCCL) Barrier() error {
	c := b.c
	if err := c.g.open(opBarrier); err != nil {
		return err
	}
	if _, err := b.enter(opBarrier, 0); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	err := c.d.AllReduce(c.scratch, c.scratch, 0, seam.DataType(b.elem), seam.Sum, c.comm, c.stream)
	c.mu.Unlock()
	return c.result(opBarrier, 0, err)
}

// SendTo enqueues an ncclSend of bytes at ptr to dest on stream s.
func (b *NCCL) SendTo(ptr DevicePtr, bytes, dest int, s Stream) error {
	if err := b.c.g.p2p(opSend, "dest", ptr, bytes, dest); err != nil {
		return err
	}
	return b.c.p2p(opSend, ptr, bytes, uint64(bytes), seam.Uint8, dest, seam.Stream(s), true)
}

// RecvFrom enqueues an ncclRecv of bytes into ptr from src on stream s.
func (b *NCCL) RecvFrom(ptr DevicePtr, bytes, src int, s Stream) error {
	if err := b.c.g.p2p(opRecv, "src", ptr, bytes, src); err != nil {
		return err
	}
	return b.c.p2p(opRecv, ptr, bytes, uint64(bytes), seam.Uint8, src, seam.Stream(s), false)
}

// Rank is this rank's index.
func (b *NCCL) Rank() int { return b.c.rank }

// WorldSize is the number of ranks.
func (b *NCCL) WorldSize() int { return b.c.world }

// RecvCommandU32 receives the 4-byte command word from root into ptr and waits as long
// as ctx allows, polling ncclCommGetAsyncError; a transport error ends the wait, is
// returned and leaves the backend unhealthy.
func (b *NCCL) RecvCommandU32(ctx context.Context, ptr DevicePtr, root int) error {
	c := b.c
	if err := c.g.recvCommand(ptr, root); err != nil {
		return err
	}
	if _, err := b.enter(opRecvCommand, 4); err != nil {
		return err
	}
	defer c.life.RUnlock()
	c.mu.Lock()
	err := c.d.Broadcast(seam.Ptr(ptr), seam.Ptr(ptr), 4, seam.Uint8, root, c.comm, c.stream)
	c.mu.Unlock()
	if err := c.result(opRecvCommand, 4, err); err != nil {
		return err
	}
	return c.wait(ctx, opRecvCommand, 4, unbounded)
}

// AllReduceAsync enqueues the in-place all-reduce on the communication stream between
// two events: the communication stream waits for the work queued on compute so far, and
// compute waits for the reduction. The host does not wait. With compute 0 (the legacy
// default stream, which belongs to the current context) it first makes the rank's
// device current on the calling thread; other streams carry their own context.
func (b *NCCL) AllReduceAsync(ptr DevicePtr, bytes int, compute Stream) error {
	c := b.c
	if err := c.g.reduceAsync(ptr, bytes); err != nil {
		return err
	}
	if _, err := b.enter(opAllReduceAsync, bytes); err != nil {
		return err
	}
	defer c.life.RUnlock()
	if compute == 0 { // the legacy default stream is the current context's
		if err := bind(c.d); err != nil {
			return &OpError{Op: opAllReduceAsync, Bytes: bytes, Rank: c.rank, Err: err}
		}
		defer runtime.UnlockOSThread()
	}
	s := seam.Stream(compute)
	p := c.buf(ptr)
	f, err := b.twoRankKernel(opAllReduceAsync, ptr, bytes, false)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.d.EventRecord(c.evIn, s); err != nil {
		return &OpError{Op: opAllReduceAsync, Bytes: bytes, Rank: c.rank, Err: err}
	}
	if err := c.d.StreamWaitEvent(c.stream, c.evIn); err != nil {
		return &OpError{Op: opAllReduceAsync, Bytes: bytes, Rank: c.rank, Err: err}
	}
	if f != 0 {
		err = b.exchangeAdd(f, p, bytes)
	} else {
		err = c.d.AllReduce(p, p, uint64(bytes/b.size), seam.DataType(b.elem), seam.Sum, c.comm, c.stream)
	}
	if err := c.result(opAllReduceAsync, bytes, err); err != nil {
		return err
	}
	if err := c.d.EventRecord(c.evOut, c.stream); err != nil {
		return &OpError{Op: opAllReduceAsync, Bytes: bytes, Rank: c.rank, Err: err}
	}
	if err := c.d.StreamWaitEvent(s, c.evOut); err != nil {
		return &OpError{Op: opAllReduceAsync, Bytes: bytes, Rank: c.rank, Err: err}
	}
	return nil
}

// RegisterBuffer registers bytes at ptr with ncclCommRegister and returns a handle for
// DeregisterBuffer. If one rank registers the buffers of an operation, all must. With an
// NCCL older than 2.19 (no ncclCommRegister) it returns an error matching ErrUnsupported:
// registration is an optimisation, so callers may carry on unregistered.
func (b *NCCL) RegisterBuffer(ptr DevicePtr, bytes int) (BufferHandle, error) {
	c := b.c
	if err := c.g.register(ptr, bytes); err != nil {
		return 0, err
	}
	if c.version < 21900 {
		return 0, &ArgError{Op: opRegister, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: "ncclCommRegister needs NCCL 2.19"}
	}
	if _, err := b.enter(opRegister, bytes); err != nil {
		return 0, err
	}
	defer c.life.RUnlock()
	if err := bind(c.d); err != nil {
		return 0, &OpError{Op: opRegister, Bytes: bytes, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	h, err := c.d.CommRegister(c.comm, seam.Ptr(ptr), uint64(bytes))
	c.mu.Unlock()
	if err := c.result(opRegister, bytes, err); err != nil {
		return 0, err
	}
	b.regMu.Lock()
	b.nextHandle++
	id := b.nextHandle
	if b.regs == nil {
		b.regs = make(map[BufferHandle]seam.Handle)
	}
	b.regs[id] = h
	b.regMu.Unlock()
	c.g.registered(id)
	return id, nil
}

// DeregisterBuffer releases a registration with ncclCommDeregister.
func (b *NCCL) DeregisterBuffer(h BufferHandle) error {
	c := b.c
	undo, err := c.g.deregister(h)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opDeregister, -1); err != nil {
		undo()
		return err
	}
	b.regMu.Lock()
	nh := b.regs[h]
	b.regMu.Unlock()
	if err := bind(c.d); err != nil {
		undo()
		return &OpError{Op: opDeregister, Bytes: -1, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	err = c.d.CommDeregister(c.comm, nh)
	c.mu.Unlock()
	if err := c.result(opDeregister, -1, err); err != nil {
		undo()
		return err
	}
	b.regMu.Lock()
	delete(b.regs, h)
	b.regMu.Unlock()
	return nil
}

// SymmetricAlloc allocates bytes with ncclMemAlloc (NCCL >= 2.19) and, with NCCL >=
// 2.27, registers them as a symmetric window, a collective call.
func (b *NCCL) SymmetricAlloc(bytes int) (DevicePtr, error) {
	c := b.c
	if err := c.g.symAlloc(bytes); err != nil {
		return 0, err
	}
	if c.version < 21900 {
		return 0, &ArgError{Op: opSymmetricAlloc, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: "ncclMemAlloc needs NCCL 2.19"}
	}
	if _, err := b.enter(opSymmetricAlloc, bytes); err != nil {
		return 0, err
	}
	defer c.life.RUnlock()
	if err := bind(c.d); err != nil {
		return 0, &OpError{Op: opSymmetricAlloc, Bytes: bytes, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	p, err := c.d.MemAllocNCCL(uint64(bytes))
	if err != nil {
		return 0, &OpError{Op: opSymmetricAlloc, Bytes: bytes, Rank: c.rank, Err: err}
	}
	var w seam.Handle
	if c.version >= 22703 {
		c.mu.Lock()
		w, err = c.d.CommWindowRegister(c.comm, p, uint64(bytes), seam.WinCollSymmetric)
		c.mu.Unlock()
		if err := c.result(opSymmetricAlloc, bytes, err); err != nil {
			if ferr := c.d.MemFreeNCCL(p); ferr != nil {
				c.cfg.log.Error("comm: free after failed window registration", "rank", c.rank, "err", ferr)
			}
			return 0, err
		}
	}
	b.regMu.Lock()
	if b.windows == nil {
		b.windows = make(map[DevicePtr]window)
	}
	b.nextWindow++
	b.windows[DevicePtr(p)] = window{h: w, bytes: bytes, seq: b.nextWindow}
	b.regMu.Unlock()
	c.g.allocated(DevicePtr(p), bytes)
	return DevicePtr(p), nil
}

// SymmetricFree waits for the work pending on the communication stream, deregisters
// the window and frees the memory with ncclMemFree.
func (b *NCCL) SymmetricFree(p DevicePtr) error {
	c := b.c
	bytes, undo, err := c.g.symFree(p)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.faultErr() == nil {
		if err := c.wait(context.Background(), opSymmetricFree, bytes, bounded); err != nil {
			undo()
			return err
		}
	}
	if err := bind(c.d); err != nil {
		undo()
		return &OpError{Op: opSymmetricFree, Bytes: bytes, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	b.regMu.Lock()
	w := b.windows[p]
	b.regMu.Unlock()
	if w.h != 0 && c.comm != 0 {
		c.mu.Lock()
		err := c.d.CommWindowDeregister(c.comm, w.h)
		c.mu.Unlock()
		if err := c.result(opSymmetricFree, bytes, err); err != nil {
			undo()
			return err
		}
	}
	b.regMu.Lock()
	delete(b.windows, p)
	b.regMu.Unlock()
	if err := c.d.MemFreeNCCL(seam.Ptr(p)); err != nil {
		return &OpError{Op: opSymmetricFree, Bytes: bytes, Rank: c.rank, Err: err}
	}
	return nil
}

// SetAddKernel hands the backend the in-place add kernel of its element type for the
// two-rank send/recv + add all-reduce path (see the type's documentation). The first
// call reads the device's SM count for the launch configuration. Element types without
// an add kernel (all but BFloat16, Float16 and Float32) ignore k.
func (b *NCCL) SetAddKernel(k Kernel) error {
	if err := b.c.g.kernel(k); err != nil {
		return err
	}
	return b.useAddKernel(k)
}

// GroupStart opens an NCCL group; see NCCLCommunicator.GroupStart.
func (b *NCCL) GroupStart() error { return b.c.GroupStart() }

// GroupEnd closes the group; see NCCLCommunicator.GroupEnd.
func (b *NCCL) GroupEnd() error { return b.c.GroupEnd() }

// IsHealthy reports false after Close, after a fatal NCCL error or a completion timeout,
// and when ncclCommGetAsyncError reports an error now.
func (b *NCCL) IsHealthy() bool { return b.c.IsHealthy() }

// AttemptReconnect aborts the communicator and initialises the next generation from
// the id that the WithReconnect function returns; every rank must call it at the same
// time. Registrations made with RegisterBuffer end with the old communicator (their
// handles become unknown); symmetric allocations stay allocated and are registered as
// windows again, in allocation order. Without WithReconnect it returns ErrUnsupported.
func (b *NCCL) AttemptReconnect(ctx context.Context) error {
	c := b.c
	if err := c.g.outsideGroup(opAttemptReconnect); err != nil {
		return err
	}
	if c.cfg.reconnect == nil {
		return &OpError{Op: opAttemptReconnect, Bytes: -1, Rank: c.rank,
			Err: fmt.Errorf("%w: no WithReconnect option", ErrUnsupported)}
	}
	ctx, stop := c.untilClose(ctx) // Close does not wait for a rendezvous with dead peers
	defer stop()
	c.interrupt.Store(interruptReconnect)
	c.life.Lock()
	defer c.life.Unlock()
	c.interrupt.Store(interruptNone)
	if c.g.isClosed() {
		return &ArgError{Op: opAttemptReconnect, Arg: "rank", Value: c.rank, Err: ErrClosed}
	}
	if c.comm != 0 {
		if err := c.d.CommAbort(c.comm); err != nil {
			c.cfg.log.Error("comm: abort before reconnect", "rank", c.rank, "err", err)
		}
		c.comm = 0
	}
	c.faultMu.Lock()
	if c.fault == nil {
		c.fault = fmt.Errorf("%w: reconnect in progress", ErrUnhealthy)
		c.faulted.Store(true)
	}
	c.faultMu.Unlock()
	b.regMu.Lock()
	for h := range b.regs {
		c.g.forget(h)
	}
	b.regs = nil
	b.generation++
	gen := b.generation
	b.regMu.Unlock()

	id, err := c.cfg.reconnect(ctx, gen)
	if err != nil {
		return &OpError{Op: opAttemptReconnect, Bytes: -1, Rank: c.rank, Err: err}
	}
	comm, err := c.initComm(ctx, id)
	if err != nil {
		return err
	}
	c.comm = comm
	c.faultMu.Lock()
	c.fault = nil
	c.faulted.Store(false)
	c.faultMu.Unlock()
	if err := b.rewindow(ctx); err != nil {
		return err
	}
	c.cfg.log.Info("comm: reconnected", "rank", c.rank, "generation", gen)
	return nil
}

// rewindow registers the symmetric allocations with the new communicator, in
// allocation order (the same on every rank).
func (b *NCCL) rewindow(ctx context.Context) error {
	c := b.c
	if c.version < 22703 {
		return nil
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	ptrs := make([]DevicePtr, 0, len(b.windows))
	for p := range b.windows {
		ptrs = append(ptrs, p)
	}
	sort.Slice(ptrs, func(i, j int) bool { return b.windows[ptrs[i]].seq < b.windows[ptrs[j]].seq })
	if err := bind(c.d); err != nil {
		return &OpError{Op: opAttemptReconnect, Bytes: -1, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	for _, p := range ptrs {
		w := b.windows[p]
		h, err := c.d.CommWindowRegister(c.comm, seam.Ptr(p), uint64(w.bytes), seam.WinCollSymmetric)
		if err == nil || code(err) == seam.InProgress {
			err = c.settle(ctx, c.comm, bounded)
		}
		if err != nil {
			return &OpError{Op: opAttemptReconnect, Bytes: w.bytes, Rank: c.rank, Err: fmt.Errorf("re-register window: %w", err)}
		}
		w.h = h
		b.windows[p] = w
	}
	return nil
}

// release runs during Close, before the communicator ends: it deregisters the
// registrations and windows left and frees the symmetric memory.
func (b *NCCL) release(_ context.Context, note func(string, error)) {
	c := b.c
	b.regMu.Lock()
	defer b.regMu.Unlock()
	for _, h := range b.regs {
		if c.comm != 0 {
			note("deregister buffer", c.d.CommDeregister(c.comm, h))
		}
	}
	b.regs = nil
	for p, w := range b.windows {
		if w.h != 0 && c.comm != 0 {
			note("deregister window", c.d.CommWindowDeregister(c.comm, w.h))
		}
		note("free symmetric memory", c.d.MemFreeNCCL(seam.Ptr(p)))
	}
	b.windows = nil
	b.releaseScratch(note)
}

// Close tears the backend down: a bounded wait for pending work, deregistration of
// what is left registered, freeing of symmetric memory, then finalize and destroy, or
// abort. Errors are logged and returned; Close never panics.
func (b *NCCL) Close() error { return b.c.Close() }
