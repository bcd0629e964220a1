package nccl

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// WindowHandle identifies a window registered by Backend.RegisterWindow.
type WindowHandle uint64

// userWindow is a window registered with RegisterWindow.
type userWindow struct {
	ptr   comm.DevicePtr
	bytes int
	h     gpulib.Handle // NCCL's window on the current communicator
	flags WindowFlag    // the registration flags (onesided.go)
}

// userWindows are the backend's windows, in registration order (handles grow).
// Guarded by NCCL.regMu.
type userWindows struct {
	m    map[WindowHandle]userWindow
	next WindowHandle
	list atomic.Pointer[[]windowEntry] // m as a list for the one-sided hot path; nil: stale (onesided.go)
}

// ordered returns the handles in registration order (the same on every rank).
func (uw *userWindows) ordered() []WindowHandle {
	hs := make([]WindowHandle, 0, len(uw.m))
	for h := range uw.m {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	return hs
}

// find returns the handle of the window registered at ptr with bytes.
func (uw *userWindows) find(ptr comm.DevicePtr, bytes int) (WindowHandle, bool) {
	for h, w := range uw.m {
		if w.ptr == ptr && w.bytes == bytes {
			return h, true
		}
	}
	return 0, false
}

// RegisterWindow registers bytes of device memory at ptr as a window of the
// communicator (ncclCommWindowRegister, NCCL >= 2.27.3; older ones return
// ErrUnsupported) with flags ORed together: WindowSymmetric when none are given, so that
// NCCL's symmetric-memory kernels and the one-sided calls (PutSignal) can use it;
// WindowDefault alone for a window without those; WindowStrictOrdering added for issue
// order. Every rank gives the same flags. The buffer is any NCCL accepts for windows: memory from SymmetricAlloc
// (ncclMemAlloc) or the CUDA VMM API, at an offset aligned to 4096 bytes; NCCL rejects
// others with ncclInvalidArgument.
//
// It is a collective call: every rank registers its buffer of the same size, in the
// same order, outside any group, and the call waits, within ctx and the operation
// timeout, until every rank has; a rank that registers alone fails with ErrTimeout
// saying that a collective waits until every rank joins it, and the communicator is unhealthy afterwards.
// Registering the same ptr and bytes again returns the same handle and calls nothing.
// AttemptReconnect registers the windows again with the new communicator, in
// registration order, so handles stay valid (if that fails, AttemptReconnect fails);
// SymmetricFree deregisters the windows still registered inside the allocation it
// frees, and Close deregisters what is left. The memory stays the caller's.
func (b *Backend) RegisterWindow(ctx context.Context, ptr comm.DevicePtr, bytes int, flags ...WindowFlag) (WindowHandle, error) {
	c := b.conn()
	winFlags := WindowSymmetric
	if len(flags) > 0 {
		winFlags = 0
		for _, f := range flags {
			if f&^(WindowSymmetric|WindowStrictOrdering) != 0 {
				return 0, &comm.ArgError{Op: core.OpRegisterWindow, Arg: "flags", Value: f, Err: comm.ErrUnsupported,
					Reason: "not a window flag (WindowDefault, WindowSymmetric, WindowStrictOrdering)"}
			}
			winFlags |= f
		}
	}
	if err := c.g.OutsideGroup(core.OpRegisterWindow); err != nil {
		return 0, err
	}
	if bytes <= 0 {
		return 0, &comm.ArgError{Op: core.OpRegisterWindow, Arg: "bytes", Value: bytes, Err: comm.ErrInvalidSize, Reason: "must be positive"}
	}
	if err := core.CheckPtr(core.OpRegisterWindow, "ptr", ptr, bytes); err != nil {
		return 0, err
	}
	if c.version < versionWindow {
		return 0, unsupported(core.OpRegisterWindow, "ncclCommWindowRegister", versionWindow, c.version)
	}
	b.regMu.Lock()
	h, ok := b.userWins.find(ptr, bytes)
	sameFlags := ok && b.userWins.m[h].flags == winFlags
	b.regMu.Unlock()
	if ok && !sameFlags {
		return 0, &comm.ArgError{Op: core.OpRegisterWindow, Arg: "flags", Value: winFlags, Err: comm.ErrUnsupported,
			Reason: "the buffer is already a window with other flags"}
	}
	if ok {
		return h, nil
	}
	var w gpulib.Handle
	err := c.enqueue(core.OpRegisterWindow, bytes, ungroupable, func(ncclOps) error {
		return c.bound(func() (err error) {
			w, err = c.d.CommWindowRegister(c.comm, gpulib.Ptr(ptr), uint64(bytes), int(winFlags))
			if err == nil || code(err) == gpulib.InProgress { // registered once every rank has joined
				err = c.settleHeld(ctx, c.comm, bounded)
			}
			return err
		})
	})
	if err != nil {
		return 0, err
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	uw := &b.userWins
	if uw.m == nil {
		uw.m = make(map[WindowHandle]userWindow)
	}
	uw.next++
	uw.m[uw.next] = userWindow{ptr: ptr, bytes: bytes, h: w, flags: winFlags}
	uw.list.Store(nil)
	return uw.next, nil
}

// DeregisterWindow releases a window from RegisterWindow (ncclCommWindowDeregister,
// local); the caller makes sure no operation still uses it.
func (b *Backend) DeregisterWindow(h WindowHandle) error {
	c := b.conn()
	if err := c.g.OutsideGroup(core.OpDeregisterWindow); err != nil {
		return err
	}
	b.regMu.Lock()
	w, ok := b.userWins.m[h]
	b.regMu.Unlock()
	if !ok {
		return &comm.ArgError{Op: core.OpDeregisterWindow, Arg: "handle", Value: h, Err: comm.ErrUnknownHandle,
			Reason: "not returned by register-window or already deregistered"}
	}
	err := c.enqueue(core.OpDeregisterWindow, w.bytes, cleanup, func(ncclOps) error {
		return c.bound(func() error { return c.d.CommWindowDeregister(c.comm, w.h) })
	})
	if err != nil {
		return err
	}
	b.regMu.Lock()
	delete(b.userWins.m, h)
	b.userWins.list.Store(nil)
	b.regMu.Unlock()
	return nil
}

// within returns, in registration order, the windows that lie inside [p, p+bytes).
// Caller holds regMu.
func (uw *userWindows) within(p comm.DevicePtr, bytes int) []WindowHandle {
	var hs []WindowHandle
	for _, h := range uw.ordered() {
		w := uw.m[h]
		if w.ptr >= p && uint64(w.ptr-p)+uint64(w.bytes) <= uint64(bytes) {
			hs = append(hs, h)
		}
	}
	return hs
}

// rewindow registers the windows with the new communicator, in registration order
// (the same on every rank). AttemptReconnect calls it holding the communicator
// exclusively.
func (b *Backend) rewindow(ctx context.Context) error {
	c := b.conn()
	if c.version < versionWindow {
		return nil
	}
	b.regMu.Lock()
	defer b.regMu.Unlock()
	return c.bound(func() error {
		for _, h := range b.userWins.ordered() {
			w := b.userWins.m[h]
			nh, err := c.d.CommWindowRegister(c.comm, gpulib.Ptr(w.ptr), uint64(w.bytes), int(w.flags))
			if err == nil || code(err) == gpulib.InProgress {
				err = c.settle(ctx, c.comm, bounded)
			}
			if err != nil {
				return &comm.OpError{Op: core.OpAttemptReconnect, Bytes: w.bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
					Err: fmt.Errorf("re-register window %d at %#x: %w", h, uint64(w.ptr), err)}
			}
			w.h = nh
			b.userWins.m[h] = w
			b.userWins.list.Store(nil)
		}
		return nil
	})
}

// releaseUserWindows deregisters the windows left at Close. Caller holds regMu.
func (b *Backend) releaseUserWindows(note func(string, error)) {
	c := b.conn()
	for _, h := range b.userWins.ordered() {
		if c.comm != 0 {
			note("deregister window", c.d.CommWindowDeregister(c.comm, b.userWins.m[h].h))
		}
	}
	b.userWins.m = nil
	b.userWins.list.Store(nil)
}
