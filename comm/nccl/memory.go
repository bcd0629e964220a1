package nccl

import (
	"context"
	"fmt"
	"runtime"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// RegisterBuffer registers bytes at ptr with ncclCommRegister and returns a handle for
// DeregisterBuffer. If one rank registers the buffers of an operation, all must. With an
// NCCL older than 2.19 (no ncclCommRegister) it returns an error matching ErrUnsupported:
// registration is an optimisation, so callers may carry on unregistered.
func (b *Backend) RegisterBuffer(ptr comm.DevicePtr, bytes int) (comm.BufferHandle, error) {
	c := b.conn()
	if err := c.g.Register(ptr, bytes); err != nil {
		return 0, err
	}
	if c.version < versionRegister {
		return 0, unsupported(core.OpRegister, "ncclCommRegister", versionRegister, c.version)
	}
	var h gpulib.Handle
	err := c.enqueue(core.OpRegister, bytes, queued, func(to ncclOps) error {
		return c.locked(to, func() error {
			return c.bound(func() (err error) {
				h, err = c.d.CommRegister(c.comm, gpulib.Ptr(ptr), uint64(bytes))
				return err
			})
		})
	})
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	b.nextHandle++
	id := b.nextHandle
	if b.regs == nil {
		b.regs = make(map[comm.BufferHandle]gpulib.Handle)
	}
	b.regs[id] = h
	b.regMu.Unlock()
	c.g.Registered(id)
	return id, nil
}

// DeregisterBuffer releases a registration with ncclCommDeregister.
func (b *Backend) DeregisterBuffer(h comm.BufferHandle) error {
	c := b.conn()
	undo, err := c.g.Deregister(h)
	if err != nil {
		return err
	}
	b.regMu.Lock()
	nh := b.regs[h]
	b.regMu.Unlock()
	err = c.enqueue(core.OpDeregister, -1, queued, func(to ncclOps) error {
		return c.locked(to, func() error {
			return c.bound(func() error { return c.d.CommDeregister(c.comm, nh) })
		})
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
func (b *Backend) SymmetricAlloc(bytes int) (comm.DevicePtr, error) {
	c := b.conn()
	if err := c.g.SymAlloc(bytes); err != nil {
		return 0, err
	}
	if c.version < versionRegister {
		return 0, unsupported(core.OpSymmetricAlloc, "ncclMemAlloc", versionRegister, c.version)
	}
	var p gpulib.Ptr
	err := c.enqueue(core.OpSymmetricAlloc, bytes, ungroupable, func(ncclOps) error {
		return c.bound(func() (err error) {
			p, err = c.d.MemAllocNCCL(uint64(bytes))
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	if b.syms == nil {
		b.syms = make(map[comm.DevicePtr]int)
	}
	b.syms[comm.DevicePtr(p)] = bytes
	b.regMu.Unlock()
	c.g.Allocated(comm.DevicePtr(p), bytes)
	return comm.DevicePtr(p), nil
}

// SymmetricFree waits for the work pending on the communication stream (unless the
// communicator failed), deregisters the windows from RegisterWindow still registered
// inside the allocation, in registration order, and frees the memory with ncclMemFree.
func (b *Backend) SymmetricFree(p comm.DevicePtr) error {
	c := b.conn()
	bytes, undo, err := c.g.SymFree(p)
	if err != nil {
		return err
	}
	if c.faultErr() == nil {
		if err := c.waitShared(bg, core.OpSymmetricFree, bytes, bounded); err != nil {
			undo()
			return err
		}
	}
	b.regMu.Lock()
	inside := b.userWins.within(p, bytes)
	b.regMu.Unlock()
	freed := false
	err = c.enqueue(core.OpSymmetricFree, bytes, cleanup, func(ncclOps) error {
		return c.bound(func() error {
			for _, h := range inside {
				b.regMu.Lock()
				w := b.userWins.m[h]
				b.regMu.Unlock()
				if c.comm != 0 {
					if err := c.d.CommWindowDeregister(c.comm, w.h); err != nil {
						return fmt.Errorf("deregister window %d at %#x: %w", h, uint64(w.ptr), err)
					}
				}
				b.regMu.Lock()
				delete(b.userWins.m, h)
				b.userWins.list.Store(nil)
				b.regMu.Unlock()
			}
			freed = true
			return c.d.MemFreeNCCL(gpulib.Ptr(p))
		})
	})
	if freed {
		b.regMu.Lock()
		delete(b.syms, p)
		b.regMu.Unlock()
	} else if err != nil {
		undo()
	}
	return err
}

// bound runs f with the rank's device current on the calling thread.
func (c *Communicator) bound(f func() error) error {
	if err := bind(c.d); err != nil {
		return err
	}
	defer runtime.UnlockOSThread()
	return f()
}

// release runs during Close, before the communicator ends: it deregisters the
// registrations and windows left and frees the symmetric memory.
func (b *Backend) release(_ context.Context, note func(string, error)) {
	c := b.conn()
	b.regMu.Lock()
	defer b.regMu.Unlock()
	for _, h := range b.regs {
		if c.comm != 0 {
			note("deregister buffer", c.d.CommDeregister(c.comm, h))
		}
	}
	b.regs = nil
	b.releaseUserWindows(note)
	for p := range b.syms {
		note("free symmetric memory", c.d.MemFreeNCCL(gpulib.Ptr(p)))
	}
	b.syms = nil
	b.releaseScratch(note)
}
