package comm

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// NCCLCommunicator is the Communicator of one rank of an NCCL communicator. It is
// created non-blocking (ncclCommInitRankConfig with blocking = 0) and enqueues every
// operation on its own non-blocking CUDA stream; it also implements StreamSyncer. The
// host waits only in Sync, Barrier, Split and Close, and every wait keeps polling
// ncclCommGetAsyncError, so a transport error ends it with that error.
//
// An NCCLCommunicator is safe for concurrent use: calls into NCCL are serialised, and
// Close interrupts a goroutine that is waiting. Teardown happens only in Close (never
// from a finalizer): a bounded wait for pending work, ncclCommFinalize with a deadline,
// then ncclCommDestroy, or ncclCommAbort when the communicator failed or the deadline
// passed.
type NCCLCommunicator struct {
	g       *guard
	d       seam.Driver
	cfg     config
	rank    int
	world   int
	version int

	// life: operations hold it shared; Close and re-initialisation hold it exclusively,
	// after setting interrupt so that waiting operations give up.
	life      sync.RWMutex
	interrupt atomic.Int32 // interruptNone, interruptClose or interruptReconnect

	// mu serialises calls into the driver that use comm, the stream or the events.
	mu      sync.Mutex
	comm    seam.Comm
	stream  seam.Stream
	evIn    seam.Event // recorded on a caller's stream, waited on by stream
	evOut   seam.Event // recorded on stream, waited on by a caller's stream
	scratch seam.Ptr   // 8 device bytes: Barrier's operand, zero-size operations' pointer

	faultMu sync.Mutex
	fault   error
	faulted atomic.Bool // fault != nil, readable without faultMu

	// Group state: the thread that opened the outermost group, and whether a blocking
	// Backend collective was enqueued inside it (GroupEnd then waits).
	groupTID  atomic.Int64
	groupWait bool

	// onClose runs in Close before the communicator ends (the Backend's cleanup).
	onClose func(ctx context.Context, note func(string, error))

	// wd is the health watchdog (WithWatchdog), nil without one. Set once in adopt.
	wd *watchdog

	// closeCtx is canceled when Close starts (see closing).
	closeOnce   sync.Once
	closeCtx    context.Context
	closeCancel context.CancelFunc
}

var (
	_ Communicator = (*NCCLCommunicator)(nil)
	_ StreamSyncer = (*NCCLCommunicator)(nil)
)

// newNCCLCommunicator initialises rank's communicator of world ranks from id on d.
func newNCCLCommunicator(ctx context.Context, d seam.Driver, id UniqueID, rank, world int, cfg config) (*NCCLCommunicator, error) {
	if d == nil {
		return nil, errors.New("init: driver is nil")
	}
	if err := checkWorld(opInit, rank, world, cfg.elem); err != nil {
		return nil, err
	}
	version, err := d.Version()
	if err != nil {
		return nil, &OpError{Op: "get-version", Bytes: -1, Rank: rank, Err: err}
	}
	c := &NCCLCommunicator{d: d, cfg: cfg, rank: rank, world: world, version: version}
	comm, err := c.initComm(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := c.adopt(comm, rank, world); err != nil {
		return nil, err
	}
	return c, nil
}

// initComm creates the NCCL communicator and waits, within ctx and the operation
// timeout, until it leaves ncclInProgress. On failure it aborts what it created.
func (c *NCCLCommunicator) initComm(ctx context.Context, id UniqueID) (seam.Comm, error) {
	if err := bind(c.d); err != nil {
		return 0, &OpError{Op: opInit, Bytes: -1, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	comm, err := c.d.CommInitRank(c.world, seam.UniqueID(id), c.rank, seam.Config{Blocking: false, Name: c.cfg.name})
	if err == nil || code(err) == seam.InProgress {
		if comm == 0 {
			err = errors.New("driver returned a null communicator")
		} else {
			err = c.settle(ctx, comm, bounded)
		}
	}
	if err != nil {
		if comm != 0 {
			if aerr := c.d.CommAbort(comm); aerr != nil {
				c.cfg.log.Error("comm: abort after failed init", "rank", c.rank, "err", aerr)
			}
		}
		return 0, &OpError{Op: opInit, Bytes: -1, Rank: c.rank, Err: err}
	}
	return comm, nil
}

// adopt makes comm (already initialised) c's communicator and creates the stream,
// events and scratch buffer. On failure it releases them and aborts comm.
func (c *NCCLCommunicator) adopt(comm seam.Comm, rank, world int) (err error) {
	c.comm, c.rank, c.world = comm, rank, world
	c.g = newGuard(rank, world, c.cfg.elem)
	if err := bind(c.d); err != nil {
		_ = c.d.CommAbort(comm)
		return &OpError{Op: opInit, Bytes: -1, Rank: rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	defer func() {
		if err != nil {
			c.releaseLocal()
			if aerr := c.d.CommAbort(comm); aerr != nil {
				c.cfg.log.Error("comm: abort after failed init", "rank", rank, "err", aerr)
			}
			err = &OpError{Op: opInit, Bytes: -1, Rank: rank, Err: err}
		}
	}()
	if c.stream, err = c.d.StreamCreate(); err != nil {
		return err
	}
	if c.evIn, err = c.d.EventCreate(); err != nil {
		return err
	}
	if c.evOut, err = c.d.EventCreate(); err != nil {
		return err
	}
	if c.scratch, err = c.d.MemAlloc(8); err != nil {
		return err
	}
	c.wd = startWatchdog(c)
	return nil
}

// releaseLocal frees the stream, events and scratch buffer; the caller holds the
// device bound. Errors are logged and returned.
func (c *NCCLCommunicator) releaseLocal() error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			c.cfg.log.Error("comm: teardown", "rank", c.rank, "step", what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if c.scratch != 0 {
		note("free scratch", c.d.MemFree(c.scratch))
		c.scratch = 0
	}
	if c.evIn != 0 {
		note("destroy event", c.d.EventDestroy(c.evIn))
		c.evIn = 0
	}
	if c.evOut != 0 {
		note("destroy event", c.d.EventDestroy(c.evOut))
		c.evOut = 0
	}
	if c.stream != 0 {
		note("destroy stream", c.d.StreamDestroy(c.stream))
		c.stream = 0
	}
	return errors.Join(errs...)
}

// fail records the first fatal error the communicator saw (it is unhealthy from then
// on) and returns err.
func (c *NCCLCommunicator) fail(err error) error {
	c.faultMu.Lock()
	first := c.fault == nil
	if first {
		c.fault = err
		c.faulted.Store(true)
	}
	c.faultMu.Unlock()
	if first {
		c.cfg.log.Warn("comm: communicator failed", "rank", c.rank, "err", err)
	}
	return err
}

func (c *NCCLCommunicator) faultErr() error {
	if !c.faulted.Load() {
		return nil
	}
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	return c.fault
}

// usable is checked by every operation once it holds life: not closed meanwhile, not
// failed.
func (c *NCCLCommunicator) usable(op string, bytes int) error {
	if c.g.isClosed() {
		return &ArgError{Op: op, Arg: "rank", Value: c.rank, Err: ErrClosed}
	}
	if f := c.faultErr(); f != nil {
		return &OpError{Op: op, Bytes: bytes, Rank: c.rank, Err: fmt.Errorf("%w: %w", ErrUnhealthy, f)}
	}
	return nil
}

// result turns a driver error of an enqueue into comm's error: ncclInProgress is waited
// out, fatal NCCL results make the communicator unhealthy.
func (c *NCCLCommunicator) result(op string, bytes int, err error) error {
	if c.wd != nil {
		c.wd.enqueued()
	}
	if err == nil {
		return nil
	}
	switch r := code(err); {
	case r == seam.InProgress:
		if err = c.settle(context.Background(), c.comm, bounded); err == nil {
			return nil
		}
	case r.Fatal():
		c.fail(err)
	}
	return &OpError{Op: op, Bytes: bytes, Rank: c.rank, Err: err}
}

// wait wraps a wait's error with the operation.
func (c *NCCLCommunicator) wait(ctx context.Context, op string, bytes int, m waitMode) error {
	if err := c.drain(ctx, m); err != nil {
		return &OpError{Op: op, Bytes: bytes, Rank: c.rank, Err: err}
	}
	return nil
}

// buf gives NCCL a valid pointer for zero-size operations that passed none.
func (c *NCCLCommunicator) buf(p DevicePtr) seam.Ptr {
	if p == 0 {
		return c.scratch
	}
	return seam.Ptr(p)
}

// inGroup reports whether a group is open, and fails when it was opened on another OS
// thread (NCCL keeps group state per thread, so the operation would escape the group).
func (c *NCCLCommunicator) inGroup(op string) (bool, error) {
	if c.g.groupDepth() == 0 {
		return false, nil
	}
	if tid, owner := threadID(), int(c.groupTID.Load()); tid != owner {
		return true, &ArgError{Op: op, Arg: "thread", Value: tid, Err: ErrGroupOpen,
			Reason: fmt.Sprintf("a group is open on thread %d; issue grouped calls from the goroutine that called group-start", owner)}
	}
	return true, nil
}

// Rank is this rank's index, from 0.
func (c *NCCLCommunicator) Rank() int { return c.rank }

// WorldSize is the number of ranks.
func (c *NCCLCommunicator) WorldSize() int { return c.world }

// Version is the loaded NCCL's version code (e.g. 22907 for 2.29.7).
func (c *NCCLCommunicator) Version() int { return c.version }

// AllReduce enqueues an in-place ncclAllReduce of count elements at ptr.
func (c *NCCLCommunicator) AllReduce(ptr DevicePtr, count int, t DType, op ReduceOp) error {
	bytes, err := c.g.typedReduce(ptr, count, t, op)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opAllReduce, bytes); err != nil {
		return err
	}
	if _, err := c.inGroup(opAllReduce); err != nil {
		return err
	}
	p := c.buf(ptr)
	c.mu.Lock()
	err = c.d.AllReduce(p, p, uint64(count), seam.DataType(t), seam.RedOp(op), c.comm, c.stream)
	c.mu.Unlock()
	return c.result(opAllReduce, bytes, err)
}

// Broadcast enqueues an in-place ncclBroadcast of count elements at ptr from root.
func (c *NCCLCommunicator) Broadcast(ptr DevicePtr, count int, t DType, root int) error {
	bytes, err := c.g.typedBroadcast(ptr, count, t, root)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opBroadcast, bytes); err != nil {
		return err
	}
	if _, err := c.inGroup(opBroadcast); err != nil {
		return err
	}
	p := c.buf(ptr)
	c.mu.Lock()
	err = c.d.Broadcast(p, p, uint64(count), seam.DataType(t), root, c.comm, c.stream)
	c.mu.Unlock()
	return c.result(opBroadcast, bytes, err)
}

// AllGather enqueues an ncclAllGather of count elements per rank.
func (c *NCCLCommunicator) AllGather(send, recv DevicePtr, count int, t DType) error {
	bytes, err := c.g.typedGather(opAllGather, send, recv, count, t, Sum, false)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opAllGather, bytes); err != nil {
		return err
	}
	if _, err := c.inGroup(opAllGather); err != nil {
		return err
	}
	c.mu.Lock()
	err = c.d.AllGather(c.buf(send), c.buf(recv), uint64(count), seam.DataType(t), c.comm, c.stream)
	c.mu.Unlock()
	return c.result(opAllGather, bytes, err)
}

// ReduceScatter enqueues an ncclReduceScatter leaving count elements per rank.
func (c *NCCLCommunicator) ReduceScatter(send, recv DevicePtr, count int, t DType, op ReduceOp) error {
	bytes, err := c.g.typedGather(opReduceScatter, send, recv, count, t, op, true)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opReduceScatter, bytes); err != nil {
		return err
	}
	if _, err := c.inGroup(opReduceScatter); err != nil {
		return err
	}
	c.mu.Lock()
	err = c.d.ReduceScatter(c.buf(send), c.buf(recv), uint64(count), seam.DataType(t), seam.RedOp(op), c.comm, c.stream)
	c.mu.Unlock()
	return c.result(opReduceScatter, bytes, err)
}

// Send enqueues an ncclSend of count elements to dest on the communication stream. The
// tag is ignored. A two-way exchange needs GroupStart/GroupEnd around both directions.
func (c *NCCLCommunicator) Send(ptr DevicePtr, count int, t DType, dest int, _ uint32) error {
	bytes, err := c.g.typedP2P(opSend, "dest", ptr, count, t, dest)
	if err != nil {
		return err
	}
	return c.p2p(opSend, ptr, bytes, uint64(count), seam.DataType(t), dest, c.stream, true)
}

// Recv enqueues an ncclRecv of count elements from src on the communication stream.
// The tag is ignored.
func (c *NCCLCommunicator) Recv(ptr DevicePtr, count int, t DType, src int, _ uint32) error {
	bytes, err := c.g.typedP2P(opRecv, "src", ptr, count, t, src)
	if err != nil {
		return err
	}
	return c.p2p(opRecv, ptr, bytes, uint64(count), seam.DataType(t), src, c.stream, false)
}

// p2p enqueues a validated send or recv on stream s (0 means the communication stream
// for the typed API; the Backend passes the caller's stream).
func (c *NCCLCommunicator) p2p(op string, ptr DevicePtr, bytes int, count uint64, t seam.DataType, peer int, s seam.Stream, send bool) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(op, bytes); err != nil {
		return err
	}
	if _, err := c.inGroup(op); err != nil {
		return err
	}
	p := c.buf(ptr)
	var err error
	c.mu.Lock()
	if send {
		err = c.d.Send(p, count, t, peer, c.comm, s)
	} else {
		err = c.d.Recv(p, count, t, peer, c.comm, s)
	}
	c.mu.Unlock()
	return c.result(op, bytes, err)
}

// Sync waits until the work enqueued on the communication stream has completed, within
// ctx and the operation timeout. A timeout makes the communicator unhealthy.
func (c *NCCLCommunicator) Sync(ctx context.Context) error {
	if err := c.g.outsideGroup(opSync); err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opSync, -1); err != nil {
		return err
	}
	return c.wait(ctx, opSync, -1, bounded)
}

// Barrier all-reduces one int32 across ranks and waits for it: no rank returns before
// every rank has reached the barrier. It implies Sync.
func (c *NCCLCommunicator) Barrier(ctx context.Context) error {
	if err := c.g.outsideGroup(opBarrier); err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opBarrier, -1); err != nil {
		return err
	}
	c.mu.Lock()
	err := c.d.AllReduce(c.scratch, c.scratch, 1, seam.Int32, seam.Sum, c.comm, c.stream)
	c.mu.Unlock()
	if err := c.result(opBarrier, -1, err); err != nil {
		return err
	}
	return c.wait(ctx, opBarrier, -1, bounded)
}

// Split creates child communicators with ncclCommSplit (NCCL >= 2.18); see
// Communicator.Split. The child is an *NCCLCommunicator with its own stream and the
// parent's options. It needs a driver that can report the child's rank and size.
func (c *NCCLCommunicator) Split(ctx context.Context, color, key int) (Communicator, error) {
	child, err := c.split(ctx, color, key)
	if child == nil {
		return nil, err
	}
	return child, err
}

func (c *NCCLCommunicator) split(ctx context.Context, color, key int) (*NCCLCommunicator, error) {
	if err := c.g.outsideGroup(opSplit); err != nil {
		return nil, err
	}
	info, ok := c.d.(seam.CommInfo)
	if !ok || c.version < 21800 {
		return nil, &ArgError{Op: opSplit, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: "needs ncclCommSplit (2.18) and a driver reporting rank and size"}
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opSplit, -1); err != nil {
		return nil, err
	}
	col := color
	if col < 0 {
		col = seam.SplitNoColor
	}
	if err := bind(c.d); err != nil {
		return nil, &OpError{Op: opSplit, Bytes: -1, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	comm, err := c.d.CommSplit(c.comm, col, key, seam.Config{Blocking: false, Name: c.cfg.name})
	c.mu.Unlock()
	if err == nil || code(err) == seam.InProgress {
		err = c.settle(ctx, c.comm, bounded)
	}
	if err == nil && comm != 0 {
		err = c.settle(ctx, comm, bounded)
	}
	if err != nil {
		if comm != 0 {
			_ = c.d.CommAbort(comm)
		}
		return nil, &OpError{Op: opSplit, Bytes: -1, Rank: c.rank, Err: err}
	}
	if color < 0 || comm == 0 {
		return nil, nil
	}
	rank, err := info.CommUserRank(comm)
	if err == nil {
		var world int
		if world, err = info.CommCount(comm); err == nil {
			child := &NCCLCommunicator{d: c.d, cfg: c.cfg, version: c.version}
			if err = child.adopt(comm, rank, world); err == nil {
				return child, nil
			}
			return nil, err
		}
	}
	_ = c.d.CommAbort(comm)
	return nil, &OpError{Op: opSplit, Bytes: -1, Rank: c.rank, Err: err}
}

// CommStream is the stream the communicator enqueues its collectives on.
func (c *NCCLCommunicator) CommStream() Stream { return Stream(c.stream) }

// WaitForStream makes communication enqueued from now on wait for the work already
// queued on s, without the host waiting.
func (c *NCCLCommunicator) WaitForStream(s Stream) error {
	return c.order("wait-for-stream", seam.Stream(s), c.stream, c.evIn)
}

// MakeStreamWait makes work queued on s from now on wait for the communication already
// enqueued, without the host waiting.
func (c *NCCLCommunicator) MakeStreamWait(s Stream) error {
	return c.order("make-stream-wait", c.stream, seam.Stream(s), c.evOut)
}

// order records ev on from and makes to wait for it.
func (c *NCCLCommunicator) order(op string, from, to seam.Stream, ev seam.Event) error {
	if err := c.g.open(op); err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(op, -1); err != nil {
		return err
	}
	if from == 0 || to == 0 { // the legacy default stream is the current context's
		if err := bind(c.d); err != nil {
			return &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
		}
		defer runtime.UnlockOSThread()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.d.EventRecord(ev, from); err != nil {
		return &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
	}
	if err := c.d.StreamWaitEvent(to, ev); err != nil {
		return &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
	}
	return nil
}

// GroupStart opens an NCCL group (ncclGroupStart): the operations up to the matching
// GroupEnd are launched together. Groups nest. The calling goroutine stays locked to its
// OS thread until the outermost GroupEnd, which it must call itself.
func (c *NCCLCommunicator) GroupStart() error {
	if c.g.groupDepth() > 0 {
		if _, err := c.inGroup(opGroupStart); err != nil {
			return err
		}
	}
	if err := c.g.groupStart(); err != nil {
		return err
	}
	runtime.LockOSThread()
	if c.g.groupDepth() == 1 {
		c.groupTID.Store(int64(threadID()))
	}
	c.mu.Lock()
	err := c.d.GroupStart()
	c.mu.Unlock()
	if err != nil {
		_, _ = c.g.groupEnd()
		runtime.UnlockOSThread()
		return &OpError{Op: opGroupStart, Bytes: -1, Rank: c.rank, Err: err}
	}
	return nil
}

// GroupEnd closes the group opened by GroupStart. Closing the outermost group launches
// its operations; if a blocking Backend collective was among them, it then waits for
// them like that collective would have.
func (c *NCCLCommunicator) GroupEnd() error {
	if c.g.groupDepth() > 0 {
		if _, err := c.inGroup(opGroupEnd); err != nil {
			return err
		}
	}
	outermost, err := c.g.groupEnd()
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	c.mu.Lock()
	err = c.d.GroupEnd()
	wait := outermost && c.groupWait
	if outermost {
		c.groupWait = false
	}
	c.mu.Unlock()
	runtime.UnlockOSThread()
	if err := c.result(opGroupEnd, -1, err); err != nil {
		return err
	}
	if wait {
		return c.wait(context.Background(), opGroupEnd, -1, bounded)
	}
	return nil
}

// IsHealthy reports false after Close, after a fatal NCCL error or a completion
// timeout, and when ncclCommGetAsyncError reports an error now.
func (c *NCCLCommunicator) IsHealthy() bool {
	if c.g.isClosed() || c.faultErr() != nil {
		return false
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.isClosed() {
		return false
	}
	if err := c.asyncError(c.comm); err != nil {
		if code(err) == seam.Success { // the query itself failed
			c.fail(err)
		}
		return false
	}
	return true
}

// Close tears the communicator down (see the type's documentation). It reports a group
// left open with ErrGroupOpen; a second Close returns ErrClosed.
func (c *NCCLCommunicator) Close() error {
	open, err := c.g.close()
	if err != nil {
		return err
	}
	c.interrupt.Store(interruptClose) // a reconnect holding the communicator gives up
	c.cancelOnClose()
	c.wd.shutdown()
	return c.shutdown(open, c.onClose)
}

// shutdown interrupts waiting operations, takes the communicator exclusively and tears
// it down; before runs first (the Backend's deregistrations), on the bound thread.
func (c *NCCLCommunicator) shutdown(openGroups int, before func(ctx context.Context, note func(string, error))) error {
	c.interrupt.Store(interruptClose)
	c.life.Lock()
	defer c.life.Unlock()
	c.interrupt.Store(interruptNone)

	var errs []error
	note := func(what string, err error) {
		if err != nil {
			c.cfg.log.Error("comm: close", "rank", c.rank, "step", what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if openGroups > 0 {
		if int64(threadID()) == c.groupTID.Load() {
			for range openGroups { // balance NCCL's per-thread group state
				note("group-end", c.d.GroupEnd())
				runtime.UnlockOSThread()
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeWait)
	defer cancel()
	if err := bind(c.d); err != nil {
		note("set device", err)
	} else {
		defer runtime.UnlockOSThread()
	}
	graceful := openGroups == 0 && c.faultErr() == nil
	if graceful {
		if err := c.drain(ctx, unbounded); err != nil {
			note("wait for pending work", err)
			graceful = false
		}
	}
	if before != nil {
		before(ctx, note)
	}
	c.endComm(ctx, graceful, note)
	if err := c.releaseLocal(); err != nil {
		errs = append(errs, err)
	}
	var err error
	if len(errs) > 0 {
		err = &OpError{Op: opClose, Bytes: -1, Rank: c.rank, Err: errors.Join(errs...)}
	}
	if openGroups > 0 {
		return errors.Join(groupLeftOpen(openGroups), err)
	}
	return err
}

// endComm finalizes and destroys the communicator within ctx, or aborts it.
func (c *NCCLCommunicator) endComm(ctx context.Context, graceful bool, note func(string, error)) {
	if c.comm == 0 {
		return
	}
	defer func() { c.comm = 0 }()
	if graceful {
		err := c.d.CommFinalize(c.comm)
		if err == nil || code(err) == seam.InProgress {
			err = c.settle(ctx, c.comm, unbounded)
		}
		if err == nil {
			note("destroy", c.d.CommDestroy(c.comm))
			return
		}
		c.cfg.log.Warn("comm: finalize failed, aborting", "rank", c.rank, "err", err)
	}
	note("abort", c.d.CommAbort(c.comm))
}

// Revoke stops every operation in flight on the communicator (ncclCommRevoke, NCCL >=
// 2.28) so that a failed job can Shrink or Close without waiting for them. The
// communicator is unhealthy afterwards.
func (c *NCCLCommunicator) Revoke() error {
	const op = "revoke"
	if err := c.g.outsideGroup(op); err != nil {
		return err
	}
	if c.version < 22807 {
		return &ArgError{Op: op, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: "ncclCommRevoke needs NCCL 2.28.7"}
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.isClosed() {
		return &ArgError{Op: op, Arg: "rank", Value: c.rank, Err: ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return err
	}
	c.mu.Lock()
	err := c.d.CommRevoke(c.comm, 0)
	c.mu.Unlock()
	if err == nil || code(err) == seam.InProgress {
		err = c.settle(context.Background(), c.comm, bounded)
	}
	c.fail(fmt.Errorf("%w: revoked", ErrUnhealthy))
	if err != nil {
		return &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
	}
	return nil
}

// Shrink creates a communicator of the ranks not listed in exclude (ncclCommShrink,
// NCCL >= 2.27); every remaining rank calls it with the same list. With abort, NCCL
// first ends the operations in flight on this communicator (NCCL_SHRINK_ABORT), the
// way to continue after a rank died. The child has its own stream and this
// communicator's options; this communicator stays open until Close.
func (c *NCCLCommunicator) Shrink(ctx context.Context, exclude []int, abort bool) (*NCCLCommunicator, error) {
	const op = "shrink"
	if err := c.g.outsideGroup(op); err != nil {
		return nil, err
	}
	info, ok := c.d.(seam.CommInfo)
	if !ok || c.version < 22703 {
		return nil, &ArgError{Op: op, Arg: "nccl version", Value: c.version, Err: ErrUnsupported,
			Reason: "needs ncclCommShrink (2.27) and a driver reporting rank and size"}
	}
	if err := c.checkExclude(op, exclude); err != nil {
		return nil, err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.isClosed() {
		return nil, &ArgError{Op: op, Arg: "rank", Value: c.rank, Err: ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return nil, err
	}
	flags := seam.ShrinkDefault
	if abort {
		flags = seam.ShrinkAbort
	}
	if err := bind(c.d); err != nil {
		return nil, &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	comm, err := c.d.CommShrink(c.comm, exclude, seam.Config{Blocking: false, Name: c.cfg.name}, flags)
	c.mu.Unlock()
	if (err == nil || code(err) == seam.InProgress) && comm != 0 {
		err = c.settle(ctx, comm, bounded)
	}
	if err == nil && comm == 0 {
		err = errors.New("driver returned a null communicator")
	}
	var rank, world int
	if err == nil {
		if rank, err = info.CommUserRank(comm); err == nil {
			world, err = info.CommCount(comm)
		}
	}
	if err != nil {
		if comm != 0 {
			_ = c.d.CommAbort(comm)
		}
		return nil, &OpError{Op: op, Bytes: -1, Rank: c.rank, Err: err}
	}
	child := &NCCLCommunicator{d: c.d, cfg: c.cfg, version: c.version}
	if err := child.adopt(comm, rank, world); err != nil {
		return nil, err
	}
	return child, nil
}
