package nccl

import (
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// versionOneSided is the NCCL that added ncclPutSignal, ncclSignal, ncclWaitSignal and
// ncclWinGetUserPtr.
const versionOneSided = 22902

// The one-sided operations' names in errors.
const (
	opPutSignal     = "put-signal"
	opSignal        = "signal"
	opWaitSignal    = "wait-signal"
	opWindowUserPtr = "window-user-ptr"
)

// WindowFlag is a window registration flag of RegisterWindow (NCCL_WIN_*).
type WindowFlag int

// The window registration flags.
const (
	// WindowDefault registers a window for NCCL's ordinary use (NCCL_WIN_DEFAULT).
	WindowDefault WindowFlag = gpulib.WinDefault
	// WindowSymmetric registers a symmetric window (NCCL_WIN_COLL_SYMMETRIC): every rank
	// registers a buffer at the same offset of an allocation of the same size, so that
	// NCCL's symmetric kernels and the one-sided calls can address it on each peer.
	// RegisterWindow uses it when given no flags.
	WindowSymmetric WindowFlag = gpulib.WinCollSymmetric
	// WindowStrictOrdering asks NCCL to keep operations on the window in issue order
	// (NCCL_WIN_STRICT_ORDERING).
	WindowStrictOrdering WindowFlag = gpulib.WinStrictOrdering
)

// Signal names one of a peer's signal counters: NCCL counts signals per (sender,
// receiver, Index, Context). The zero value is index 0 of context 0, the only one NCCL
// 2.29 accepts (it rejects others with ncclInvalidArgument).
type Signal struct {
	Index   int
	Context int
}

// SignalWait is one term of WaitSignal: Count more signals from Peer on Signal.
type SignalWait struct {
	Peer   int
	Signal Signal
	Count  int
}

// oneSided returns the driver's one-sided calls, or the error of a library without
// them (written to be inlined: the test is the hot path).
func (c *Communicator) oneSided(op, call string) (gpulib.OneSided, error) {
	if c.ones != nil && c.version >= versionOneSided {
		return c.ones, nil
	}
	return nil, c.noOneSided(op, call)
}

// oneSidedOf is d's one-sided calls, nil without them (Communicator.ones, found once
// when the communicator is made).
func oneSidedOf(d gpulib.Driver) gpulib.OneSided {
	os, _ := d.(gpulib.OneSided)
	return os
}

// noOneSided is the error of oneSided.
func (c *Communicator) noOneSided(op, call string) error {
	if c.version < versionOneSided {
		return unsupported(op, call, versionOneSided, c.version)
	}
	return &comm.ArgError{Op: op, Arg: "driver", Value: fmt.Sprintf("%T", c.d), Err: comm.ErrUnsupported,
		Reason: "the driver has no one-sided calls"}
}

// streamOr is s, or the communication stream for 0.
func (c *Communicator) streamOr(s comm.Stream) gpulib.Stream {
	if s == 0 {
		return c.stream
	}
	return gpulib.Stream(s)
}

// PutSignal enqueues on stream s (0: the communication stream) a one-sided put
// (ncclPutSignal, NCCL >= 2.29.2; older ones return ErrUnsupported naming the version):
// bytes at src land in peer's part of window win at offset bytes, and then sig of peer
// counts one more signal from this rank. The peer takes no part; it learns that the
// data has arrived with WaitSignal. src must lie inside a symmetric window registered
// on this backend (NCCL requires it), and offset+bytes inside win. bytes may be 0 (the
// put only signals; src must still lie inside a symmetric window, as NCCL requires).
// Like every enqueued operation it returns before the data moves; Sync on s waits for
// it.
//
// Inside a group (GroupStart/GroupEnd, a Group's Add, comm.InGroup) it is checked at
// the call and recorded, as NCCL allows, and the outermost GroupEnd (a Group's Submit)
// makes it with the group's other calls; NCCL launches a communicator's one-sided
// calls of a group first, in the order they were issued, then its collectives and
// point-to-point calls.
func (b *Backend) PutSignal(src comm.DevicePtr, bytes, peer int, win WindowHandle, offset int, sig Signal, s comm.Stream) error {
	c := b.conn()
	if err := c.g.P2p(opPutSignal, "peer", src, bytes, peer); err != nil {
		return err
	}
	os, err := c.oneSided(opPutSignal, "ncclPutSignal")
	if err != nil {
		return err
	}
	h, ok := b.putWindow(src, bytes, win, offset)
	if !ok {
		return b.putArgErr(src, bytes, win, offset)
	}
	st := c.streamOr(s)
	if groups.open.Load() != 0 { // a group is open somewhere: enqueue sorts it out
		return b.putSignalIn(os, src, bytes, peer, h, offset, sig, st)
	}
	// The usual case: enqueue's sequence for a queued operation written out, as in
	// AllReduce, without a defer (comm's own cost, see BenchmarkPutSignalVsRaw).
	c.life.RLock()
	if c.g.Closed.Load() || c.faulted.Load() || c.suspended.Load() {
		if err := c.unusable(opPutSignal, bytes); err != nil {
			c.life.RUnlock()
			return withPeer(err, peer)
		}
	}
	c.mu.Lock()
	if c.fr != nil {
		c.fr.Record(flightrec.Call{Op: flightrec.PutSignal, Peer: peer, In: int64(bytes), Out: int64(bytes), Type: frByte})
	}
	err = os.PutSignal(c.buf(src), uint64(bytes), gpulib.Uint8, peer, h, uint64(offset), sig.Index, sig.Context, 0, c.comm, st)
	c.mu.Unlock()
	if c.wd != nil {
		c.wd.enqueued()
	}
	err = c.result(opPutSignal, bytes, err)
	c.life.RUnlock()
	if err != nil {
		return withPeer(err, peer)
	}
	return nil
}

// frByte is the flight recorder's type of the one-sided calls' bytes.
var frByte = frType(gpulib.Uint8)

// putSignalIn is PutSignal through enqueue: inside a group on this goroutine the call
// is recorded.
func (b *Backend) putSignalIn(os gpulib.OneSided, src comm.DevicePtr, bytes, peer int, win gpulib.Handle, offset int, sig Signal, st gpulib.Stream) error {
	c := b.conn()
	err := c.enqueue(opPutSignal, bytes, queued, func(to ncclOps) error {
		switch o := to.(type) {
		case *recorder:
			return o.PutSignal(c.buf(src), uint64(bytes), peer, win, uint64(offset), sig, c.comm, st)
		case frOps:
			o.fr.Record(flightrec.Call{Op: flightrec.PutSignal, Peer: peer, In: int64(bytes), Out: int64(bytes), Type: frByte})
		}
		return os.PutSignal(c.buf(src), uint64(bytes), gpulib.Uint8, peer, win, uint64(offset), sig.Index, sig.Context, 0, c.comm, st)
	})
	if err != nil {
		return withPeer(err, peer)
	}
	return nil
}

// putArgErr says which of PutSignal's window arguments is wrong.
func (b *Backend) putArgErr(src comm.DevicePtr, bytes int, win WindowHandle, offset int) error {
	b.regMu.Lock()
	defer b.regMu.Unlock()
	w, ok := b.userWins.m[win]
	switch {
	case !ok:
		return &comm.ArgError{Op: opPutSignal, Arg: "window", Value: win, Err: comm.ErrUnknownHandle,
			Reason: "not returned by register-window or already deregistered"}
	case offset < 0 || offset > w.bytes || bytes > w.bytes-offset:
		return &comm.ArgError{Op: opPutSignal, Arg: "offset", Value: offset, Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("%d bytes at offset %d do not fit the window's %d bytes", bytes, offset, w.bytes)}
	}
	return &comm.ArgError{Op: opPutSignal, Arg: "src", Value: src, Err: comm.ErrUnknownPointer,
		Reason: fmt.Sprintf("%d bytes at src are not inside a symmetric window of this backend (NCCL requires it)", bytes)}
}

// windowEntry is one window of userWindows.list.
type windowEntry struct {
	handle WindowHandle
	userWindow
}

// putWindow returns NCCL's handle of window win when bytes at offset fit it and
// [src, src+bytes) lies inside a symmetric window. It scans userWindows.list, without a
// lock (few windows: no map and no lock on the hot path); a registration change makes
// the list stale and the next call builds it again under regMu.
func (b *Backend) putWindow(src comm.DevicePtr, bytes int, win WindowHandle, offset int) (gpulib.Handle, bool) {
	lp := b.userWins.list.Load()
	if lp == nil {
		b.regMu.Lock()
		list := make([]windowEntry, 0, len(b.userWins.m))
		for h, w := range b.userWins.m {
			list = append(list, windowEntry{handle: h, userWindow: w})
		}
		lp = &list
		b.userWins.list.Store(lp)
		b.regMu.Unlock()
	}
	var to *userWindow
	inside := false
	for i := range *lp {
		e := &(*lp)[i]
		if e.handle == win {
			to = &e.userWindow
		}
		if e.flags&WindowSymmetric != 0 && src >= e.ptr && uint64(src-e.ptr)+uint64(bytes) <= uint64(e.bytes) {
			inside = true
		}
	}
	if to == nil || !inside || offset < 0 || offset > to.bytes || bytes > to.bytes-offset {
		return 0, false
	}
	return to.h, true
}

// Signal enqueues on stream s (0: the communication stream) a signal to peer without
// data (ncclSignal, NCCL >= 2.29.2): sig of peer counts one more signal from this rank.
// Inside a group it is recorded, as PutSignal is.
func (b *Backend) Signal(peer int, sig Signal, s comm.Stream) error {
	c := b.conn()
	if err := c.g.P2p(opSignal, "peer", 0, 0, peer); err != nil {
		return err
	}
	os, err := c.oneSided(opSignal, "ncclSignal")
	if err != nil {
		return err
	}
	st := c.streamOr(s)
	if groups.open.Load() != 0 { // a group is open somewhere: enqueue sorts it out
		return c.signalIn(os, peer, sig, st)
	}
	// The usual case, written out as in PutSignal.
	c.life.RLock()
	if c.g.Closed.Load() || c.faulted.Load() || c.suspended.Load() {
		if err := c.unusable(opSignal, 0); err != nil {
			c.life.RUnlock()
			return withPeer(err, peer)
		}
	}
	c.mu.Lock()
	if c.fr != nil {
		c.fr.Record(flightrec.Call{Op: flightrec.Signal, Peer: peer, Type: frByte})
	}
	err = os.Signal(peer, sig.Index, sig.Context, 0, c.comm, st)
	c.mu.Unlock()
	if c.wd != nil {
		c.wd.enqueued()
	}
	err = c.result(opSignal, 0, err)
	c.life.RUnlock()
	if err != nil {
		return withPeer(err, peer)
	}
	return nil
}

// signalIn is Signal through enqueue: inside a group on this goroutine the call is
// recorded.
func (c *Communicator) signalIn(os gpulib.OneSided, peer int, sig Signal, st gpulib.Stream) error {
	err := c.enqueue(opSignal, 0, queued, func(to ncclOps) error {
		switch o := to.(type) {
		case *recorder:
			return o.Signal(peer, sig, c.comm, st)
		case frOps:
			o.fr.Record(flightrec.Call{Op: flightrec.Signal, Peer: peer, Type: frByte})
		}
		return os.Signal(peer, sig.Index, sig.Context, 0, c.comm, st)
	})
	if err != nil {
		return withPeer(err, peer)
	}
	return nil
}

// WaitSignal enqueues on stream s (0: the communication stream) a wait for signals
// (ncclWaitSignal, NCCL >= 2.29.2): the work enqueued on s after it runs once, for each
// term, Count signals from Peer on Signal have arrived beyond those earlier waits of
// this rank consumed; the wait consumes them. The host does not wait (Sync on s does).
// A wait whose signals never come holds s: the operation timeout and the watchdog
// report it like any operation that does not complete. Inside a group it is recorded,
// as PutSignal is.
func (b *Backend) WaitSignal(waits []SignalWait, s comm.Stream) error {
	c := b.conn()
	if err := c.g.Open(opWaitSignal); err != nil {
		return err
	}
	if len(waits) == 0 {
		return &comm.ArgError{Op: opWaitSignal, Arg: "waits", Value: 0, Err: comm.ErrInvalidSize, Reason: "nothing to wait for"}
	}
	for i, w := range waits {
		if w.Peer < 0 || w.Peer >= c.world {
			return core.CheckRank(opWaitSignal, fmt.Sprintf("waits[%d].Peer", i), w.Peer, c.world)
		}
		if w.Count <= 0 || w.Count > 1<<31-1 {
			return &comm.ArgError{Op: opWaitSignal, Arg: fmt.Sprintf("waits[%d].Count", i), Value: w.Count, Err: comm.ErrInvalidSize,
				Reason: "must be positive and fit NCCL's int"}
		}
	}
	os, err := c.oneSided(opWaitSignal, "ncclWaitSignal")
	if err != nil {
		return err
	}
	st := c.streamOr(s)
	buf := signalDescs.Get().(*[]gpulib.SignalDesc)
	defer signalDescs.Put(buf)
	descs := (*buf)[:0]
	for _, w := range waits {
		descs = append(descs, gpulib.SignalDesc{OpCnt: int32(w.Count), Peer: int32(w.Peer), SigIdx: int32(w.Signal.Index), Ctx: int32(w.Signal.Context)})
	}
	*buf = descs
	return c.waitSignal(os, *buf, st)
}

// waitSignal enqueues the wait for descs.
func (c *Communicator) waitSignal(os gpulib.OneSided, descs []gpulib.SignalDesc, st gpulib.Stream) error {
	return c.enqueue(opWaitSignal, 0, queued, func(to ncclOps) error {
		switch o := to.(type) {
		case *recorder:
			return o.WaitSignal(descs, c.comm, st)
		case frOps:
			for _, d := range descs {
				o.fr.Record(flightrec.Call{Op: flightrec.WaitSignal, Peer: int(d.Peer), In: int64(d.OpCnt), Out: int64(d.OpCnt), Type: frByte})
			}
		}
		return os.WaitSignal(descs, c.comm, st)
	})
}

// signalDescs are WaitSignal's descriptor arrays, reused (NCCL copies them during the
// call).
var signalDescs = sync.Pool{New: func() any { return new([]gpulib.SignalDesc) }}

// WindowUserPtr returns the buffer window h was registered with, as NCCL reports it
// (ncclWinGetUserPtr, NCCL >= 2.29.2).
func (b *Backend) WindowUserPtr(h WindowHandle) (comm.DevicePtr, error) {
	c := b.conn()
	if err := c.g.Open(opWindowUserPtr); err != nil {
		return 0, err
	}
	os, err := c.oneSided(opWindowUserPtr, "ncclWinGetUserPtr")
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	w, ok := b.userWins.m[h]
	b.regMu.Unlock()
	if !ok {
		return 0, &comm.ArgError{Op: opWindowUserPtr, Arg: "handle", Value: h, Err: comm.ErrUnknownHandle,
			Reason: "not returned by register-window or already deregistered"}
	}
	var p gpulib.Ptr
	err = c.enqueue(opWindowUserPtr, 0, ungroupable, func(ncclOps) error {
		return c.bound(func() (err error) {
			p, err = os.WinGetUserPtr(c.comm, w.h)
			return err
		})
	})
	return comm.DevicePtr(p), err
}
