package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// bg is the context of waits bounded by the operation timeout alone.
var bg = context.Background()

// opKind says how an operation meets groups and whether the host waits for it.
type opKind uint8

const (
	// queued operations are enqueued, in a group or not, and the host does not wait.
	queued opKind = iota
	// blocking operations are enqueued and then waited for (within the operation
	// timeout); in a group the outermost GroupEnd waits instead.
	blocking
	// ungroupable operations fail with ErrGroupOpen on a thread with a group open.
	ungroupable
	// cleanup operations are ungroupable and also run on a failed communicator (they
	// release what it holds).
	cleanup
	// untimed operations are ungroupable and wait without a deadline (a command
	// receive): the watchdog does not time them.
	untimed
)

// ncclOps are the NCCL communication calls an operation makes: the driver's
// (Communicator.direct), or, inside a group, the group's recorder, which records them
// for the outermost GroupEnd.
type ncclOps interface {
	AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error
	Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error
	AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error
	ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error
	Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error
	AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error
	Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error
	Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error
	Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error
	Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error
}

// enqueue is the one sequence every operation of the NCCL types follows once its
// arguments are valid: the lifecycle lock (shared), the usability check (not closed,
// not failed), the group scope of the calling goroutine, the driver lock, the call, its
// result (ncclInProgress waited out, fatal results recorded), and for a blocking
// operation the wait. call makes its NCCL calls on to: the driver, or inside a group
// the group's recorder (grouped(to)), and then the group's outermost GroupEnd makes
// them, reports their results and does the wait. The closure does not escape, so the
// sequence allocates nothing. AllReduce (outside groups) and AllReduceAsync write the
// sequence out (no closure, fewer calls between the library's): a change here is a
// change there too.
func (c *Communicator) enqueue(op string, bytes int, kind opKind, call func(to ncclOps) error) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.Closed.Load() || c.faulted.Load() || c.suspended.Load() { // usable, its test inline
		if err := c.unusable(op, bytes); err != nil && (kind != cleanup || c.g.IsClosed()) {
			return err
		}
	}
	if kind == blocking { // the host would wait for captured work (graph.go)
		// refuseCapture without its closed check, which usable just made under life
		if capturing, err := c.d.StreamIsCapturing(c.stream); err != nil || capturing {
			return c.captureErr(op, bytes, c.stream, capturing, err)
		}
	}
	if tg := c.groupOf(); tg != nil {
		if kind >= ungroupable {
			return core.GroupOpenErr(op, groupDepth())
		}
		return c.record(tg, op, bytes, kind == blocking, call)
	}
	c.mu.Lock()
	err := call(c.direct)
	var last flightrec.ID // what a completed wait completes, under mu: no record of others after it
	if c.fr != nil && kind == blocking {
		last = c.fr.LastLocked()
	}
	c.mu.Unlock()
	if c.wd != nil && kind != untimed {
		c.wd.enqueued()
	}
	if err := c.result(op, bytes, err); err != nil {
		return err
	}
	if kind == blocking {
		err := c.waitDone(op, bytes)
		if err == nil {
			c.fr.CompletedLater(last) // no second lock: noted by a dump or the next record of its slot
		}
		return err
	}
	return nil
}

// waitDone is a blocking operation's wait (drain within the operation timeout) with its
// first poll written out: work already complete costs the two queries and no further
// call.
func (c *Communicator) waitDone(op string, bytes int) error {
	done, err := c.d.StreamQuery(c.stream)
	if err == nil && done {
		res, err := c.d.CommGetAsyncError(c.comm)
		if asyncOK(res, err) {
			return nil
		}
		return c.opErr(op, bytes, c.asyncFailure(c.comm, res, err))
	}
	return c.waitFrom(op, bytes, done, err)
}

// waitFrom is waitDone after its first query of the stream answered done, err.
func (c *Communicator) waitFrom(op string, bytes int, done bool, err error) error {
	if err := c.drained(bg, c.stream, bounded, done, err); err != nil {
		return c.opErr(op, bytes, err)
	}
	return nil
}

// record runs a grouped operation's call with the group's recorder: its NCCL calls
// join the group, and c becomes a member (wait: a blocking operation, whose wait the
// outermost GroupEnd does). Recording needs no driver lock; other driver calls of the
// operation (a registration, an event, a device copy) are made at once, taking it
// (locked), as outside a group.
func (c *Communicator) record(tg *threadGroup, op string, bytes int, wait bool, call func(to ncclOps) error) error {
	if err := tg.join(c); err != nil { // first: what call records before a failure is submitted with c held
		return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	r := &tg.rec
	r.c, r.op, r.bytes = c, op, bytes // r.tg is tg's own
	if err := call(r); err != nil {
		return c.result(op, bytes, err)
	}
	if wait {
		tg.members[tg.last].wait = true
	}
	return nil
}

// locked runs f, which calls the driver itself, under the driver lock: enqueue holds it
// for calls made on the driver, record does not (to records).
func (c *Communicator) locked(to ncclOps, f func() error) error {
	if grouped(to) {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	return f()
}

// outsideGroup fails on a thread with a group open (for the operations that check it
// before taking the communicator).
func outsideGroup(op string) error {
	if depth := groupDepth(); depth > 0 {
		return core.GroupOpenErr(op, depth)
	}
	return nil
}

// buf gives NCCL a valid pointer for zero-size operations that passed none.
func (c *Communicator) buf(p comm.DevicePtr) gpulib.Ptr {
	if p == 0 {
		return c.scratch
	}
	return gpulib.Ptr(p)
}

// AllReduce sums bytes at ptr in place across ranks (ncclAllReduce of the element type,
// or the two-rank path: see the type's documentation) and waits for the result.
func (b *Backend) AllReduce(ptr comm.DevicePtr, bytes int) error {
	c := b.conn()
	if !c.g.Valid(ptr, bytes) || groups.open.Load() != 0 || b.addKernel.Load() != 0 || c.cfg.CollCheck > 0 {
		return b.allReduce(ptr, bytes)
	}
	// The usual case (valid arguments, no group open in the process, no two-rank kernel):
	// enqueue's sequence and waitDone written out, the same checks and calls in the same
	// order without the closure and the calls between them (comm's own cost, see
	// BenchmarkAllReduceVsRaw).
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.Closed.Load() || c.faulted.Load() || c.suspended.Load() {
		if err := c.unusable(core.OpAllReduce, bytes); err != nil {
			return err
		}
	}
	if capturing, err := c.d.StreamIsCapturing(c.stream); err != nil || capturing {
		return c.captureErr(core.OpAllReduce, bytes, c.stream, capturing, err)
	}
	p := c.buf(ptr)
	n := uint64(bytes / b.size)
	c.mu.Lock()
	id := c.fr.Record(flightrec.Call{Op: flightrec.AllReduce, In: int64(n), Out: int64(n), Type: frType(gpulib.DataType(b.elem))})
	err := c.d.AllReduce(p, p, n, gpulib.DataType(b.elem), gpulib.Sum, c.comm, c.stream)
	c.mu.Unlock()
	if c.wd != nil {
		c.wd.enqueued()
	}
	if err := c.result(core.OpAllReduce, bytes, err); err != nil {
		return err
	}
	done, err := c.d.StreamQuery(c.stream)
	if err == nil && done {
		res, err := c.d.CommGetAsyncError(c.comm)
		if asyncOK(res, err) {
			c.fr.CompletedLater(id) // no second lock: noted by a dump or the next record of its slot
			return nil
		}
		return c.opErr(core.OpAllReduce, bytes, c.asyncFailure(c.comm, res, err))
	}
	if err := c.waitFrom(core.OpAllReduce, bytes, done, err); err != nil {
		return err
	}
	c.fr.CompletedLater(id) // no second lock: noted by a dump or the next record of its slot
	return nil
}

// allReduce is AllReduce through guard.reduce and enqueue: invalid arguments, a group
// open somewhere in the process (inside one on this goroutine the call is recorded),
// the two-rank path.
func (b *Backend) allReduce(ptr comm.DevicePtr, bytes int) error {
	c := b.conn()
	if err := c.g.Reduce(core.OpAllReduce, ptr, bytes); err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllReduce, bytes/b.size, comm.DType(b.elem), -1, comm.Sum)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllReduce, bytes, blocking, func(to ncclOps) error {
		p := c.buf(ptr)
		if f := b.twoRankKernel(bytes, grouped(to)); f != 0 {
			return b.exchangeAdd(f, p, bytes)
		}
		return to.AllReduce(p, p, uint64(bytes/b.size), gpulib.DataType(b.elem), gpulib.Sum, c.comm, c.stream)
	})
}

// AllGather gathers bytes from every rank into recv in rank order and waits.
func (b *Backend) AllGather(send, recv comm.DevicePtr, bytes int) error {
	c := b.conn()
	if err := c.g.Gather(core.OpAllGather, send, recv, bytes, false); err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllGather, bytes, comm.Uint8, -1, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllGather, bytes, blocking, func(to ncclOps) error {
		return to.AllGather(c.buf(send), c.buf(recv), uint64(bytes), gpulib.Uint8, c.comm, c.stream)
	})
}

// ReduceScatter sums across ranks (elements of the element type) and leaves this rank's
// bytes-sized share at recv, then waits.
func (b *Backend) ReduceScatter(send, recv comm.DevicePtr, bytes int) error {
	c := b.conn()
	if err := c.g.Gather(core.OpReduceScatter, send, recv, bytes, true); err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpReduceScatter, bytes/b.size, comm.DType(b.elem), -1, comm.Sum)); err != nil {
		return err
	}
	return c.enqueue(core.OpReduceScatter, bytes, blocking, func(to ncclOps) error {
		return to.ReduceScatter(c.buf(send), c.buf(recv), uint64(bytes/b.size), gpulib.DataType(b.elem), gpulib.Sum, c.comm, c.stream)
	})
}

// Broadcast copies bytes at ptr on root to every rank, in place, and waits.
func (b *Backend) Broadcast(ptr comm.DevicePtr, bytes, root int) error {
	c := b.conn()
	if err := c.g.Broadcast(ptr, bytes, root); err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpBroadcast, bytes, comm.Uint8, root, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpBroadcast, bytes, blocking, func(to ncclOps) error {
		p := c.buf(ptr)
		return to.Broadcast(p, p, uint64(bytes), gpulib.Uint8, root, c.comm, c.stream)
	})
}

// Barrier enqueues a zero-count all-reduce on the communication stream and returns
// without waiting. NCCL treats a zero-count collective as complete at once, so it
// synchronises nothing; use Communicator().Barrier for a real barrier.
func (b *Backend) Barrier() error {
	c := b.conn()
	if err := c.g.Open(core.OpBarrier); err != nil {
		return err
	}
	return c.enqueue(core.OpBarrier, 0, queued, func(to ncclOps) error {
		return to.AllReduce(c.scratch, c.scratch, 0, gpulib.DataType(b.elem), gpulib.Sum, c.comm, c.stream)
	})
}

// SendTo enqueues an ncclSend of bytes at ptr to dest on stream s.
func (b *Backend) SendTo(ptr comm.DevicePtr, bytes, dest int, s comm.Stream) error {
	if err := b.conn().g.P2p(core.OpSend, "dest", ptr, bytes, dest); err != nil {
		return err
	}
	return b.c.p2p(core.OpSend, ptr, bytes, uint64(bytes), gpulib.Uint8, dest, gpulib.Stream(s), true)
}

// RecvFrom enqueues an ncclRecv of bytes into ptr from src on stream s.
func (b *Backend) RecvFrom(ptr comm.DevicePtr, bytes, src int, s comm.Stream) error {
	if err := b.conn().g.P2p(core.OpRecv, "src", ptr, bytes, src); err != nil {
		return err
	}
	return b.c.p2p(core.OpRecv, ptr, bytes, uint64(bytes), gpulib.Uint8, src, gpulib.Stream(s), false)
}

// command is the state of RecvCommandU32: a receive whose wait ended (its context
// expired) before the command arrived stays pending on the communication stream, and
// the next call completes it instead of enqueuing another.
type command struct {
	mu      sync.Mutex // one RecvCommandU32 at a time
	pending bool
	ptr     comm.DevicePtr // where the pending receive lands
	root    int
	comm    gpulib.Comm // the communicator it is pending on
}

// RecvCommandU32 receives the 4-byte command word from root into ptr and waits as long
// as ctx allows, polling ncclCommGetAsyncError; a transport error ends the wait, is
// returned and leaves the backend unhealthy. The wait has no operation timeout, and the
// watchdog does not time it (an idle worker is healthy).
//
// No command is lost or delivered twice across cancellations: when ctx ends first, the
// call returns ctx's error and the receive stays pending (its buffer stays in use); the
// next RecvCommandU32 completes that receive instead of enqueuing a new one and
// delivers the command into its own ptr (copied on the device when it differs). The
// next call must name the same root. Other operations enqueued meanwhile wait behind the
// pending receive, as NCCL orders them.
func (b *Backend) RecvCommandU32(ctx context.Context, ptr comm.DevicePtr, root int) error {
	c := b.conn()
	if err := c.g.RecvCommand(ptr, root); err != nil {
		return err
	}
	if err := c.refuseCapture(core.OpRecvCommand, 4, c.stream); err != nil {
		return err
	}
	m := &b.cmd
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending && m.root != root && m.comm == c.comm {
		return &comm.ArgError{Op: core.OpRecvCommand, Arg: "root", Value: root, Err: comm.ErrInvalidRank,
			Reason: fmt.Sprintf("a command receive from root %d is pending (its wait was canceled): complete it first", m.root)}
	}
	from := m.ptr
	err := c.enqueue(core.OpRecvCommand, 4, untimed, func(ncclOps) error {
		if m.pending && m.comm != c.comm { // the receive ended with its communicator (reconnect)
			m.pending = false
		}
		if m.pending {
			if from == ptr {
				return nil
			}
			return c.d.MemcpyDtoDAsync(gpulib.Ptr(ptr), gpulib.Ptr(from), 4, c.stream)
		}
		if w := c.wd; w != nil { // the watchdog times what is ahead of the receive, not it
			c.cmdAt, c.aheadAt = w.now().UnixNano(), 0
			if at := w.first.Swap(0); at != 0 && c.d.EventRecord(c.evAhead, c.stream) == nil {
				c.aheadAt = at
			}
		}
		err := c.d.Broadcast(gpulib.Ptr(ptr), gpulib.Ptr(ptr), 4, gpulib.Uint8, root, c.comm, c.stream)
		if err != nil && code(err) != gpulib.InProgress { // in progress: queued, settled by enqueue
			return err
		}
		m.pending, m.ptr, m.root, m.comm = true, ptr, root, c.comm
		if c.d.EventRecord(c.evCmd, c.stream) == nil {
			c.cmdArmed.Store(true)
		}
		return err
	})
	if err == nil {
		if err = c.waitShared(ctx, core.OpRecvCommand, 4, unbounded); err == nil {
			m.pending = false
			return nil
		}
	}
	if ctx.Err() == nil || !errors.Is(err, ctx.Err()) { // not a canceled wait: the receive is gone
		m.pending = false
	} else {
		m.ptr = ptr // completed into ptr by the copy, if any
	}
	return err
}

// AllReduceAsync enqueues the in-place all-reduce on the communication stream between
// two events: the communication stream waits for the work queued on compute so far, and
// compute waits for the reduction. The host does not wait. With compute 0 (the legacy
// default stream, which belongs to the current context) it first makes the rank's
// device current on the calling thread; other streams carry their own context.
func (b *Backend) AllReduceAsync(ptr comm.DevicePtr, bytes int, compute comm.Stream) error {
	c := b.conn()
	if !c.g.Valid(ptr, bytes) || !c.g.Ungrouped() { // guard.reduceAsync's one-test case inlined
		if err := c.g.ReduceAsync(ptr, bytes); err != nil {
			return err
		}
	}
	if compute == 0 { // the legacy default stream is the current context's
		if err := bind(c.d); err != nil {
			return &comm.OpError{Op: core.OpAllReduceAsync, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
		defer runtime.UnlockOSThread()
	}
	// enqueue's sequence for an ungroupable operation, written out as in AllReduce.
	s := gpulib.Stream(compute)
	f := b.twoRankKernel(bytes, false)
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.Closed.Load() || c.faulted.Load() || c.suspended.Load() {
		if err := c.unusable(core.OpAllReduceAsync, bytes); err != nil {
			return err
		}
	}
	if c.groupOf() != nil {
		return core.GroupOpenErr(core.OpAllReduceAsync, groupDepth())
	}
	p := c.buf(ptr)
	c.mu.Lock()
	err := c.d.EventRecord(c.evIn, s)
	if err == nil {
		err = c.d.StreamWaitEvent(c.stream, c.evIn)
	}
	if err == nil {
		// The two-rank path may allocate and query the stream: not while capturing.
		if f != 0 && !c.capturing(s) {
			err = b.exchangeAdd(f, p, bytes)
		} else {
			err = c.direct.AllReduce(p, p, uint64(bytes/b.size), gpulib.DataType(b.elem), gpulib.Sum, c.comm, c.stream) // recorded
		}
		if code(err) == gpulib.InProgress { // the reduction is on the stream once NCCL settles
			err = c.settleHeld(bg, c.comm, bounded)
		}
	}
	if err == nil {
		err = c.d.EventRecord(c.evOut, c.stream)
	}
	if err == nil {
		err = c.d.StreamWaitEvent(s, c.evOut)
	}
	c.mu.Unlock()
	if c.wd != nil {
		c.wd.enqueued()
	}
	return c.result(core.OpAllReduceAsync, bytes, err)
}

// SetAddKernel hands the backend the in-place add kernel of its element type for the
// two-rank send/recv + add all-reduce path (see the type's documentation). The first
// call reads the device's SM count for the launch configuration. Element types without
// an add kernel (all but BFloat16, Float16 and Float32) ignore k.
func (b *Backend) SetAddKernel(k comm.Kernel) error {
	if err := b.conn().g.Kernel(k); err != nil {
		return err
	}
	return b.useAddKernel(k)
}

// GroupStart opens an NCCL group; see Communicator.GroupStart.
func (b *Backend) GroupStart() error { return b.conn().GroupStart() }

// GroupEnd closes the group; see Communicator.GroupEnd.
func (b *Backend) GroupEnd() error { return b.conn().GroupEnd() }

// AllReduce enqueues an in-place ncclAllReduce of count elements at ptr.
func (c *Communicator) AllReduce(ptr comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	return c.on().AllReduce(ptr, count, t, op)
}

// Broadcast enqueues an in-place ncclBroadcast of count elements at ptr from root.
func (c *Communicator) Broadcast(ptr comm.DevicePtr, count int, t comm.DType, root int) error {
	return c.on().Broadcast(ptr, count, t, root)
}

// AllGather enqueues an ncclAllGather of count elements per rank.
func (c *Communicator) AllGather(send, recv comm.DevicePtr, count int, t comm.DType) error {
	return c.on().AllGather(send, recv, count, t)
}

// ReduceScatter enqueues an ncclReduceScatter leaving count elements per rank.
func (c *Communicator) ReduceScatter(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	return c.on().ReduceScatter(send, recv, count, t, op)
}

// Send enqueues an ncclSend of count elements to dest on the communication stream. The
// tag is ignored. A two-way exchange needs GroupStart/GroupEnd around both directions.
func (c *Communicator) Send(ptr comm.DevicePtr, count int, t comm.DType, dest int, _ uint32) error {
	return c.on().Send(ptr, count, t, dest, 0)
}

// Recv enqueues an ncclRecv of count elements from src on the communication stream.
// The tag is ignored.
func (c *Communicator) Recv(ptr comm.DevicePtr, count int, t comm.DType, src int, _ uint32) error {
	return c.on().Recv(ptr, count, t, src, 0)
}

// p2p enqueues a validated send or recv on stream s (the typed API passes the
// communication stream, the Backend the caller's).
func (c *Communicator) p2p(op string, ptr comm.DevicePtr, bytes int, count uint64, t gpulib.DataType, peer int, s gpulib.Stream, send bool) error {
	err := c.enqueue(op, bytes, queued, func(to ncclOps) error {
		if send {
			return to.Send(c.buf(ptr), count, t, peer, c.comm, s)
		}
		return to.Recv(c.buf(ptr), count, t, peer, c.comm, s)
	})
	if err != nil {
		return withPeer(err, peer)
	}
	return nil
}

// withPeer names the peer of a failed send or receive.
func withPeer(err error, peer int) error {
	var oe *comm.OpError
	if errors.As(err, &oe) {
		oe.Peer = peer
	}
	return err
}

// Sync waits until the work enqueued on the communication stream has completed, within
// ctx and the operation timeout. A timeout makes the communicator unhealthy.
func (c *Communicator) Sync(ctx context.Context) error {
	if err := c.g.OutsideGroup(core.OpSync); err != nil {
		return err
	}
	if err := c.refuseCapture(core.OpSync, -1, c.stream); err != nil {
		return err
	}
	last := c.fr.Last()
	err := c.waitShared(ctx, core.OpSync, -1, bounded)
	if err == nil {
		c.fr.CompletedLater(last)
	}
	return err
}

// Barrier all-reduces one int32 across ranks and waits for it: no rank returns before
// every rank has reached the barrier. It implies Sync.
func (c *Communicator) Barrier(ctx context.Context) error {
	if err := c.g.Open(core.OpBarrier); err != nil {
		return err
	}
	if err := c.refuseCapture(core.OpBarrier, -1, c.stream); err != nil {
		return err
	}
	err := c.enqueue(core.OpBarrier, -1, ungroupable, func(ncclOps) error {
		return c.d.AllReduce(c.scratch, c.scratch, 1, gpulib.Int32, gpulib.Sum, c.comm, c.stream)
	})
	if err != nil {
		return err
	}
	return c.waitShared(ctx, core.OpBarrier, -1, bounded)
}

// CommStream is the stream the communicator enqueues its collectives on.
func (c *Communicator) CommStream() comm.Stream { return comm.Stream(c.stream) }

// WaitForStream makes communication enqueued from now on wait for the work already
// queued on s, without the host waiting.
func (c *Communicator) WaitForStream(s comm.Stream) error {
	return c.order("wait-for-stream", gpulib.Stream(s), c.stream, c.evIn)
}

// MakeStreamWait makes work queued on s from now on wait for the communication already
// enqueued, without the host waiting.
func (c *Communicator) MakeStreamWait(s comm.Stream) error {
	return c.order("make-stream-wait", c.stream, gpulib.Stream(s), c.evOut)
}

// order records ev on from and makes to wait for it.
func (c *Communicator) order(op string, from, to gpulib.Stream, ev gpulib.Event) error {
	if err := c.g.Open(op); err != nil {
		return err
	}
	if from == 0 || to == 0 { // the legacy default stream is the current context's
		if err := bind(c.d); err != nil {
			return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
		defer runtime.UnlockOSThread()
	}
	return c.enqueue(op, -1, queued, func(calls ncclOps) error {
		return c.locked(calls, func() error {
			if err := c.d.EventRecord(ev, from); err != nil {
				return err
			}
			return c.d.StreamWaitEvent(to, ev)
		})
	})
}

// IsHealthy reports false after Close, after a fatal NCCL error or a completion
// timeout, and when ncclCommGetAsyncError reports an error now.
func (c *Communicator) IsHealthy() bool {
	if c.g.IsClosed() || c.faultErr() != nil {
		return false
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() {
		return false
	}
	if err := c.asyncError(c.comm); err != nil {
		if code(err) == gpulib.Success { // the query itself failed
			c.fail(err)
		}
		return false
	}
	return true
}

// usable is checked by every operation once it holds life: not closed meanwhile, not
// failed.
func (c *Communicator) usable(op string, bytes int) error {
	if c.g.IsClosed() || c.faulted.Load() || c.suspended.Load() { // the usual case: three loads, no call
		return c.unusable(op, bytes)
	}
	return nil
}

// unusable is usable's error: closed, else the recorded fault (none when a reconnect
// cleared it meanwhile).
func (c *Communicator) unusable(op string, bytes int) error {
	if c.g == nil {
		return core.NotMade(op)
	}
	if c.g.IsClosed() {
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if f := c.faultErr(); f != nil {
		return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: fmt.Errorf("%w: %w", comm.ErrUnhealthy, f)}
	}
	return c.suspendedErr(op, bytes)
}

// result turns a driver error of an enqueue into comm's error: ncclInProgress is waited
// out, fatal NCCL results make the communicator unhealthy.
func (c *Communicator) result(op string, bytes int, err error) error {
	if err == nil { // inlined: success costs one test
		return nil
	}
	return c.failed(op, bytes, err)
}

// failed is result for a driver error.
func (c *Communicator) failed(op string, bytes int, err error) error {
	switch r := code(err); {
	case r == gpulib.InProgress:
		if err = c.settle(bg, c.comm, bounded); err == nil {
			return nil
		}
	case gpulib.Fatal(r):
		err = c.fail(err)
	}
	return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
}
