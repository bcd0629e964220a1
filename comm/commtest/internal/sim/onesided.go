package sim

import (
	"fmt"
	"math/bits"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// sinceOneSided is the NCCL that added ncclPutSignal, ncclSignal, ncclWaitSignal and
// ncclWinGetUserPtr.
const sinceOneSided = 22902

var _ gpulib.OneSided = (*Driver)(nil)

// rmaDesc is one rank's ncclPutSignal, ncclSignal or ncclWaitSignal.
//
// The model follows NCCL's copy-engine path (src/rma/rma_ce.cc): a put copies the
// source into the peer's part of the window, and then, in the same stream order,
// increments the counter the peer keeps for this rank's signals; a wait adds its counts
// to what the waiting rank has already consumed from each peer and holds its stream
// until every counter reaches that value (cuStreamWaitValue64 with GEQ), so each wait
// consumes the signals it waited for and a later wait needs new ones. Counters are kept
// per (sender, receiver, signal index, context); NCCL accepts only index 0 and
// context 0 so far, and so does the simulator.
type rmaDesc struct {
	call   string
	local  gpulib.Ptr
	bytes  uint64
	peer   int
	win    window // the calling rank's part of the window (put)
	offset uint64
	sigIdx int
	ctx    int
	descs  []gpulib.SignalDesc // wait
}

// sigKey names one signal counter: signals from src to dst.
type sigKey struct {
	src, dst, sigIdx, ctx int
}

// sigCounters are a clique's signal counters. Guarded by World.mu.
type sigCounters struct {
	arrived  map[sigKey]int64
	consumed map[sigKey]int64
	changed  chan struct{} // closed and replaced when a signal arrives
}

func (cl *clique) signalsLocked() *sigCounters {
	if cl.sigs == nil {
		cl.sigs = &sigCounters{arrived: map[sigKey]int64{}, consumed: map[sigKey]int64{}, changed: make(chan struct{})}
	}
	return cl.sigs
}

// PutSignal is ncclPutSignal.
func (d *Driver) PutSignal(local gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, win gpulib.Handle, offset uint64, sigIdx, ctx int, flags uint32, c gpulib.Comm, s gpulib.Stream) error {
	const call = "ncclPutSignal"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceOneSided); err != nil {
		return err
	}
	return d.communicate(call, func() (*task, error) {
		rc, st, err := d.w.operandsLocked(d.dev, c, s, call, dt)
		if err != nil {
			return nil, err
		}
		if err := rmaArgsLocked(rc, call, peer, sigIdx, ctx, flags); err != nil {
			return nil, err
		}
		hi, bytes := bits.Mul64(count, uint64(elemSize(dt)))
		if hi != 0 || bytes > 1<<62 {
			return nil, ncclErr(gpulib.InvalidArgument, call, "count %d of %s overflows", count, dtypeName(dt))
		}
		pw, ok := rc.wins[win]
		if !ok || win == 0 {
			return nil, ncclErr(gpulib.InvalidArgument, call, "peerWin %#x is not a window of communicator %#x", uintptr(win), uintptr(c))
		}
		if offset > pw.bytes || bytes > pw.bytes-offset {
			return nil, ncclErr(gpulib.InvalidArgument, call, "peerWinOffset %d + %d bytes exceeds the window's %d bytes", offset, bytes, pw.bytes)
		}
		if local == 0 {
			return nil, ncclErr(gpulib.InvalidArgument, call, "localbuff is NULL")
		}
		inWin := false
		for _, lw := range rc.wins {
			if lw.flags&winSymmetric != 0 && local >= lw.buf && uint64(local-lw.buf) <= lw.bytes && bytes <= lw.bytes-uint64(local-lw.buf) {
				inWin = true
			}
		}
		if !inWin {
			return nil, ncclErr(gpulib.InvalidArgument, call, "localbuff %#x is not in a symmetric window", uint64(local))
		}
		return &task{rc: rc, s: st, rma: &rmaDesc{call: call, local: local, bytes: bytes, peer: peer, win: pw, offset: offset, sigIdx: sigIdx, ctx: ctx}}, nil
	})
}

// Signal is ncclSignal.
func (d *Driver) Signal(peer, sigIdx, ctx int, flags uint32, c gpulib.Comm, s gpulib.Stream) error {
	const call = "ncclSignal"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceOneSided); err != nil {
		return err
	}
	return d.communicate(call, func() (*task, error) {
		rc, st, err := d.w.operandsLocked(d.dev, c, s, call, gpulib.Int8)
		if err != nil {
			return nil, err
		}
		if err := rmaArgsLocked(rc, call, peer, sigIdx, ctx, flags); err != nil {
			return nil, err
		}
		return &task{rc: rc, s: st, rma: &rmaDesc{call: call, peer: peer, sigIdx: sigIdx, ctx: ctx}}, nil
	})
}

// WaitSignal is ncclWaitSignal. The descriptors are copied before it returns.
func (d *Driver) WaitSignal(descs []gpulib.SignalDesc, c gpulib.Comm, s gpulib.Stream) error {
	const call = "ncclWaitSignal"
	if err := d.enter(call); err != nil {
		return err
	}
	if err := d.needs(call, sinceOneSided); err != nil {
		return err
	}
	return d.communicate(call, func() (*task, error) {
		rc, st, err := d.w.operandsLocked(d.dev, c, s, call, gpulib.Int32)
		if err != nil {
			return nil, err
		}
		if len(descs) == 0 {
			return nil, ncclErr(gpulib.InvalidArgument, call, "invalid arguments: no descriptors")
		}
		for i, sd := range descs {
			switch {
			case sd.OpCnt <= 0:
				return nil, ncclErr(gpulib.InvalidArgument, call, "descriptor %d has invalid opCnt %d", i, sd.OpCnt)
			case sd.SigIdx != 0:
				return nil, ncclErr(gpulib.InvalidArgument, call, "descriptor %d has invalid sigIdx %d (must be 0)", i, sd.SigIdx)
			case sd.Ctx != 0:
				return nil, ncclErr(gpulib.InvalidArgument, call, "descriptor %d has invalid context %d (must be 0)", i, sd.Ctx)
			case sd.Peer < 0 || int(sd.Peer) >= rc.cl.n:
				return nil, ncclErr(gpulib.InvalidArgument, call, "descriptor %d: peer %d out of range [0, %d)", i, sd.Peer, rc.cl.n)
			}
		}
		return &task{rc: rc, s: st, rma: &rmaDesc{call: call, descs: append([]gpulib.SignalDesc(nil), descs...)}}, nil
	})
}

// WinGetUserPtr is ncclWinGetUserPtr.
func (d *Driver) WinGetUserPtr(c gpulib.Comm, win gpulib.Handle) (gpulib.Ptr, error) {
	const call = "ncclWinGetUserPtr"
	return locked(d, call, sinceOneSided, func(w *World) (gpulib.Ptr, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return 0, err
		}
		pw, ok := rc.wins[win]
		if !ok || win == 0 {
			return 0, ncclErr(gpulib.InvalidArgument, call, "win %#x is not a window of communicator %#x", uintptr(win), uintptr(c))
		}
		return pw.buf, nil
	})
}

// rmaArgsLocked checks what NCCL checks of every one-sided call (src/enqueue.cc).
func rmaArgsLocked(rc *rankComm, call string, peer, sigIdx, ctx int, flags uint32) error {
	switch {
	case peer < 0 || peer >= rc.cl.n:
		return ncclErr(gpulib.InvalidArgument, call, "peer %d out of range [0, %d)", peer, rc.cl.n)
	case ctx != 0:
		return ncclErr(gpulib.InvalidArgument, call, "context %d is invalid (must be 0)", ctx)
	case sigIdx != 0:
		return ncclErr(gpulib.InvalidArgument, call, "signal index %d is invalid (must be 0)", sigIdx)
	case flags != 0:
		return ncclErr(gpulib.InvalidArgument, call, "flags %d is invalid (must be 0)", flags)
	}
	return nil
}

// runRMA runs a one-sided operation once its stream reaches it.
func (w *World) runRMA(rc *rankComm, cl *clique, r *rmaDesc) error {
	defer w.finishOp(rc)
	if !w.beforeOp(rc) {
		return nil
	}
	if r.descs != nil {
		return w.waitSignals(rc, cl, r)
	}
	if r.bytes > 0 {
		data, err := rc.dev.read(r.local, r.bytes)
		if err != nil {
			return w.deviceFault(cl, r.call, rc.rank, "local buffer", err)
		}
		w.mu.Lock()
		dst, ok := peerWindowLocked(cl, r.peer, r.win)
		w.mu.Unlock()
		if !ok {
			return w.deviceFault(cl, r.call, rc.rank, "peer window", fmt.Errorf("rank %d has no part of the window", r.peer))
		}
		if err := cl.ranks[r.peer].dev.write(dst.buf+gpulib.Ptr(r.offset), data); err != nil {
			return w.deviceFault(cl, r.call, rc.rank, "peer window", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	sc := cl.signalsLocked()
	sc.arrived[sigKey{src: rc.rank, dst: r.peer, sigIdx: r.sigIdx, ctx: r.ctx}]++
	close(sc.changed)
	sc.changed = make(chan struct{})
	return nil
}

// waitSignals holds the stream until every descriptor's count has arrived beyond what
// this rank consumed before, then consumes them.
func (w *World) waitSignals(rc *rankComm, cl *clique, r *rmaDesc) error {
	for {
		w.mu.Lock()
		sc := cl.signalsLocked()
		ready := true
		for _, sd := range r.descs {
			k := sigKey{src: int(sd.Peer), dst: rc.rank, sigIdx: int(sd.SigIdx), ctx: int(sd.Ctx)}
			if sc.arrived[k]-sc.consumed[k] < int64(sd.OpCnt) {
				ready = false
			}
		}
		if ready {
			for _, sd := range r.descs {
				sc.consumed[sigKey{src: int(sd.Peer), dst: rc.rank, sigIdx: int(sd.SigIdx), ctx: int(sd.Ctx)}] += int64(sd.OpCnt)
			}
			w.mu.Unlock()
			return nil
		}
		ch := sc.changed
		w.mu.Unlock()
		if !wait(ch, cl, rc) {
			return nil
		}
	}
}

// peerWindowLocked finds peer's part of the window whose calling rank's part is local.
func peerWindowLocked(cl *clique, peer int, local window) (window, bool) {
	prc := cl.ranks[peer]
	if prc == nil {
		return window{}, false
	}
	for _, pw := range prc.wins {
		if pw.seq == local.seq {
			return pw, true
		}
	}
	return window{}, false
}
