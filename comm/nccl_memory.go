package comm

import (
	"context"
	"fmt"
	"runtime"
	"sort"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// window is a symmetric allocation: its NCCL window (0 until RegisterWindow) and its
// registration order (0: not registered).
type window struct {
	h     gpulib.Handle
	bytes int
	seq   int
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
	if c.version < versionRegister {
		return 0, unsupported(opRegister, "ncclCommRegister", versionRegister, c.version)
	}
	var h gpulib.Handle
	err := c.enqueue(opRegister, bytes, queued, func(bool) error {
		return c.bound(func() (err error) {
			h, err = c.d.CommRegister(c.comm, gpulib.Ptr(ptr), uint64(bytes))
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	b.nextHandle++
	id := b.nextHandle
	if b.regs == nil {
		b.regs = make(map[BufferHandle]gpulib.Handle)
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
	b.regMu.Lock()
	nh := b.regs[h]
	b.regMu.Unlock()
	err = c.enqueue(opDeregister, -1, queued, func(bool) error {
		return c.bound(func() error { return c.d.CommDeregister(c.comm, nh) })
	})
	if err != nil {
		undo()
		return err
	}
	b.regMu.Lock()
	delete(b.regs, h)
	b.regMu.Unlock()
	return nil
}

// SymmetricAlloc allocates bytes with ncclMemAlloc (NCCL >= 2.19). It is local: no
// other rank takes part. Registering the memory as a symmetric window, NCCL's
// collective step, is RegisterWindow's.
func (b *NCCL) SymmetricAlloc(bytes int) (DevicePtr, error) {
	c := b.c
	if err := c.g.symAlloc(bytes); err != nil {
		return 0, err
	}
	if c.version < versionRegister {
		return 0, unsupported(opSymmetricAlloc, "ncclMemAlloc", versionRegister, c.version)
	}
	var p gpulib.Ptr
	err := c.enqueue(opSymmetricAlloc, bytes, ungroupable, func(bool) error {
		return c.bound(func() (err error) {
			p, err = c.d.MemAllocNCCL(uint64(bytes))
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	if b.windows == nil {
		b.windows = make(map[DevicePtr]window)
	}
	b.windows[DevicePtr(p)] = window{bytes: bytes}
	b.regMu.Unlock()
	c.g.allocated(DevicePtr(p), bytes)
	return DevicePtr(p), nil
}

// RegisterWindow registers memory from SymmetricAlloc as a symmetric window
// (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, NCCL >= 2.27.3), so that NCCL's
// symmetric-memory kernels can use it. It is a collective call: every rank registers
// its allocation of the same size, in the same order, and the call waits, within ctx
// and the operation timeout, until every rank has; a rank that registers alone fails
// with ErrTimeout saying that a peer never joined, and the communicator is unhealthy
// afterwards. Registering a window twice does nothing. SymmetricFree deregisters it,
// and AttemptReconnect registers the windows again with the new communicator, in
// registration order.
func (b *NCCL) RegisterWindow(ctx context.Context, p DevicePtr) error {
	c := b.c
	if err := c.g.outsideGroup(opRegisterWindow); err != nil {
		return err
	}
	b.regMu.Lock()
	w, ok := b.windows[p]
	b.regMu.Unlock()
	if !ok {
		return &ArgError{Op: opRegisterWindow, Arg: "ptr", Value: fmt.Sprintf("%#x", uint64(p)), Err: ErrUnknownPointer,
			Reason: "not returned by symmetric-alloc or already freed"}
	}
	if c.version < versionWindow {
		return unsupported(opRegisterWindow, "ncclCommWindowRegister", versionWindow, c.version)
	}
	if w.seq != 0 {
		return nil
	}
	var h gpulib.Handle
	err := c.enqueue(opRegisterWindow, w.bytes, ungroupable, func(bool) error {
		return c.bound(func() (err error) {
			h, err = c.d.CommWindowRegister(c.comm, gpulib.Ptr(p), uint64(w.bytes), gpulib.WinCollSymmetric)
			if err == nil || code(err) == gpulib.InProgress { // registered once every rank has joined
				err = c.settle(ctx, c.comm, bounded)
			}
			return err
		})
	})
	if err != nil {
		return err
	}
	b.regMu.Lock()
	b.nextWindow++
	w.h, w.seq = h, b.nextWindow
	b.windows[p] = w
	b.regMu.Unlock()
	return nil
}

// SymmetricFree waits for the work pending on the communication stream (unless the
// communicator failed), deregisters the window and frees the memory with ncclMemFree.
func (b *NCCL) SymmetricFree(p DevicePtr) error {
	c := b.c
	bytes, undo, err := c.g.symFree(p)
	if err != nil {
		return err
	}
	if c.faultErr() == nil {
		if err := c.waitShared(bg, opSymmetricFree, bytes, bounded); err != nil {
			undo()
			return err
		}
	}
	b.regMu.Lock()
	w := b.windows[p]
	b.regMu.Unlock()
	freed := false
	err = c.enqueue(opSymmetricFree, bytes, cleanup, func(bool) error {
		return c.bound(func() error {
			if w.h != 0 && c.comm != 0 {
				if err := c.d.CommWindowDeregister(c.comm, w.h); err != nil {
					return err
				}
			}
			freed = true
			return c.d.MemFreeNCCL(gpulib.Ptr(p))
		})
	})
	if freed {
		b.regMu.Lock()
		delete(b.windows, p)
		b.regMu.Unlock()
	} else if err != nil {
		undo()
	}
	return err
}

// bound runs f with the rank's device current on the calling thread.
func (c *NCCLCommunicator) bound(f func() error) error {
	if err := bind(c.d); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	return f()
}

// rewindow registers the windows with the new communicator, in registration order
// (the same on every rank). AttemptReconnect calls it holding the
// communicator exclusively.
func (b *NCCL) rewindow(ctx context.Context) error {
	c := b.c
	if c.version < versionWindow {
		return nil
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	ptrs := make([]DevicePtr, 0, len(b.windows))
	for p, w := range b.windows {
		if w.seq != 0 {
			ptrs = append(ptrs, p)
		}
	}
	sort.Slice(ptrs, func(i, j int) bool { return b.windows[ptrs[i]].seq < b.windows[ptrs[j]].seq })
	return c.bound(func() error {
		for _, p := range ptrs {
			w := b.windows[p]
			h, err := c.d.CommWindowRegister(c.comm, gpulib.Ptr(p), uint64(w.bytes), gpulib.WinCollSymmetric)
			if err == nil || code(err) == gpulib.InProgress {
				err = c.settle(ctx, c.comm, bounded)
			}
			if err != nil {
				return &OpError{Op: opAttemptReconnect, Bytes: w.bytes, Rank: c.rank, Err: fmt.Errorf("re-register window: %w", err)}
			}
			w.h = h
			b.windows[p] = w
		}
		return b.rewindowUser(ctx)
	})
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
	b.releaseUserWindows(note)
	for p, w := range b.windows {
		if w.h != 0 && c.comm != 0 {
			note("deregister window", c.d.CommWindowDeregister(c.comm, w.h))
		}
		note("free symmetric memory", c.d.MemFreeNCCL(gpulib.Ptr(p)))
	}
	b.windows = nil
	b.releaseScratch(note)
}
