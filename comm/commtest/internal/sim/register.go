package sim

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

type registration struct {
	buf   gpulib.Ptr
	bytes uint64
}

type window struct {
	buf   gpulib.Ptr
	bytes uint64
	flags int
	seq   uint64 // the communicator's window registration it is this rank's part of
}

// Window flags (NCCL_WIN_*).
const (
	winSymmetric      = 0x01
	winStrictOrdering = 0x02
	winAlignment      = 4096 // NCCL_WIN_REQUIRED_ALIGNMENT
)

func (w *World) commRegister(d *device, c gpulib.Comm, buf gpulib.Ptr, bytes uint64) (gpulib.Handle, error) {
	const call = "ncclCommRegister"
	if bytes == 0 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "size 0")
	}
	if err := d.check(buf, bytes); err != nil {
		return 0, ncclErr(gpulib.InvalidArgument, call, "buffer [%#x, +%d): %v", uint64(buf), bytes, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, call)
	if err == nil {
		err = rc.readyLocked(call)
	}
	if err != nil {
		return 0, err
	}
	h := gpulib.Handle(w.handle())
	rc.regs[h] = registration{buf: buf, bytes: bytes}
	return h, nil
}

func (w *World) commDeregister(d *device, c gpulib.Comm, h gpulib.Handle) error {
	const call = "ncclCommDeregister"
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		return err
	}
	if _, ok := rc.regs[h]; !ok {
		return ncclErr(gpulib.InvalidArgument, call, "handle %#x is not registered with communicator %#x", uintptr(h), uintptr(c))
	}
	delete(rc.regs, h)
	return nil
}

type winEntry struct {
	offset, bytes uint64
	flags         int
	nonblocking   bool
}

func (w *World) commWindowRegister(d *device, c gpulib.Comm, buf gpulib.Ptr, bytes uint64, flags int) (gpulib.Handle, error) {
	const call = "ncclCommWindowRegister"
	if bytes == 0 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "size 0")
	}
	if flags&^(winSymmetric|winStrictOrdering) != 0 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "flags %#x: unknown bits", flags)
	}
	base, _, nccl, err := d.allocationOf(buf, bytes)
	switch {
	case err != nil:
		return 0, ncclErr(gpulib.InvalidArgument, call, "buffer [%#x, +%d): %v", uint64(buf), bytes, err)
	case !nccl:
		return 0, ncclErr(gpulib.InvalidArgument, call, "buffer %#x: window memory must come from ncclMemAlloc", uint64(buf))
	case flags&winSymmetric != 0 && (uint64(buf)-base)%winAlignment != 0:
		return 0, ncclErr(gpulib.InvalidArgument, call, "buffer %#x: symmetric windows need an offset aligned to %d bytes, got %d", uint64(buf), winAlignment, uint64(buf)-base)
	}
	w.mu.Lock()
	rc, err := w.commLocked(d, c, call)
	if err == nil {
		err = rc.readyLocked(call)
	}
	if err == nil {
		for _, win := range rc.wins {
			if win.buf == buf {
				err = ncclErr(gpulib.InvalidArgument, call, "buffer %#x is already a window of communicator %#x", uint64(buf), uintptr(c))
			}
		}
	}
	if err != nil {
		w.mu.Unlock()
		return 0, err
	}
	cl := rc.cl
	seq := rc.winSeq
	rc.winSeq++
	g, ok := cl.wins[seq]
	if !ok {
		g = newGather(cl.n, "")
		cl.wins[seq] = g
	}
	g.entries[rc.rank] = winEntry{offset: uint64(buf) - base, bytes: bytes, flags: flags, nonblocking: !rc.blocking}
	if !rc.blocking {
		rc.busy++
	}
	h := gpulib.Handle(w.handle())
	rc.wins[h] = window{buf: buf, bytes: bytes, flags: flags, seq: seq}
	complete := len(g.entries) == g.need
	if complete {
		first := g.entries[0].(winEntry)
		for r := 1; r < cl.n; r++ {
			e := g.entries[r].(winEntry)
			switch {
			case e.flags != first.flags:
				cl.failLocked(gpulib.InvalidUsage, fmt.Sprintf("window registration: rank 0 gave flags %#x, rank %d gave %#x", first.flags, r, e.flags))
			case first.flags&winSymmetric != 0 && (e.offset != first.offset || e.bytes != first.bytes):
				cl.failLocked(gpulib.InvalidUsage, fmt.Sprintf("symmetric window: rank 0 registered offset %d size %d, rank %d offset %d size %d",
					first.offset, first.bytes, r, e.offset, e.bytes))
			}
		}
		for r, v := range g.entries {
			if v.(winEntry).nonblocking {
				cl.ranks[r].busy--
			}
		}
		close(g.done)
		delete(cl.wins, seq)
	}
	w.mu.Unlock()
	if !rc.blocking {
		if !complete {
			return h, inProgress(call, "waiting for the other ranks")
		}
		return h, nil
	}
	if err := w.waitDone(rc, cl, g.done, call); err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cl.err != gpulib.Success {
		return 0, ncclErr(cl.err, call, "%s", cl.errDetail)
	}
	return h, nil
}

func (w *World) commWindowDeregister(d *device, c gpulib.Comm, h gpulib.Handle) error {
	const call = "ncclCommWindowDeregister"
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		return err
	}
	if _, ok := rc.wins[h]; !ok {
		return ncclErr(gpulib.InvalidArgument, call, "window %#x is not registered with communicator %#x", uintptr(h), uintptr(c))
	}
	delete(rc.wins, h)
	return nil
}
