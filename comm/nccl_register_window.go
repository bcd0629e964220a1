package comm

import (
	"context"
	"fmt"
	"sort"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// WindowHandle identifies a window registered by NCCL.RegisterWindow.
type WindowHandle uint64

const (
	opRegisterWindow   = "register-window"
	opDeregisterWindow = "deregister-window"
)

// userWindow is a window registered with RegisterWindow on a caller's buffer.
type userWindow struct {
	ptr   DevicePtr
	bytes int
	h     gpulib.Handle // NCCL's window on the current communicator
}

// userWindows are the backend's RegisterWindow windows. Guarded by NCCL.regMu.
type userWindows struct {
	m    map[WindowHandle]userWindow
	next WindowHandle
}

// RegisterWindow registers bytes of device memory at ptr as a symmetric window of the
// communicator, on any buffer NCCL accepts for windows (memory from ncclMemAlloc or the
// CUDA VMM API, at an offset aligned to 4096 bytes; NCCL rejects others with
// ncclInvalidArgument): ncclCommWindowRegister with
// NCCL_WIN_COLL_SYMMETRIC (NCCL >= 2.27.3; older ones return ErrUnsupported). It is a
// collective call: every rank registers its buffer of the same size, in the same order
// of RegisterWindow and SymmetricAlloc calls, and it cannot be part of a group.
// AttemptReconnect registers the windows again with the new communicator, in
// registration order, so handles stay valid; if that fails, AttemptReconnect fails.
// Close deregisters what is left. The memory stays the caller's.
func (b *NCCL) RegisterWindow(ptr DevicePtr, bytes int) (WindowHandle, error) {
	c := b.c
	if err := c.g.outsideGroup(opRegisterWindow); err != nil {
		return 0, err
	}
	if bytes <= 0 {
		return 0, &ArgError{Op: opRegisterWindow, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "must be positive"}
	}
	if err := checkPtr(opRegisterWindow, "ptr", ptr, bytes); err != nil {
		return 0, err
	}
	if c.version < versionWindow {
		return 0, unsupported(opRegisterWindow, "ncclCommWindowRegister", versionWindow, c.version)
	}
	var w gpulib.Handle
	err := c.enqueue(opRegisterWindow, bytes, ungroupable, func(bool) error {
		return c.bound(func() (err error) {
			w, err = c.d.CommWindowRegister(c.comm, gpulib.Ptr(ptr), uint64(bytes), gpulib.WinCollSymmetric)
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
	uw.m[uw.next] = userWindow{ptr: ptr, bytes: bytes, h: w}
	return uw.next, nil
}

// DeregisterWindow releases a window from RegisterWindow (ncclCommWindowDeregister,
// local); the caller makes sure no operation still uses it.
func (b *NCCL) DeregisterWindow(h WindowHandle) error {
	c := b.c
	if err := c.g.outsideGroup(opDeregisterWindow); err != nil {
		return err
	}
	b.regMu.Lock()
	w, ok := b.userWins.m[h]
	b.regMu.Unlock()
	if !ok {
		return &ArgError{Op: opDeregisterWindow, Arg: "handle", Value: h, Err: ErrUnknownHandle,
			Reason: "not returned by register-window or already deregistered"}
	}
	err := c.enqueue(opDeregisterWindow, w.bytes, cleanup, func(bool) error {
		return c.bound(func() error { return c.d.CommWindowDeregister(c.comm, w.h) })
	})
	if err != nil {
		return err
	}
	b.regMu.Lock()
	delete(b.userWins.m, h)
	b.regMu.Unlock()
	return nil
}

// rewindowUser registers the RegisterWindow windows with the new communicator, in
// registration order (the same on every rank). Caller holds regMu and the device.
func (b *NCCL) rewindowUser(ctx context.Context) error {
	c := b.c
	hs := make([]WindowHandle, 0, len(b.userWins.m))
	for h := range b.userWins.m {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i] < hs[j] })
	for _, h := range hs {
		w := b.userWins.m[h]
		nh, err := c.d.CommWindowRegister(c.comm, gpulib.Ptr(w.ptr), uint64(w.bytes), gpulib.WinCollSymmetric)
		if err == nil || code(err) == gpulib.InProgress {
			err = c.settle(ctx, c.comm, bounded)
		}
		if err != nil {
			return &OpError{Op: opAttemptReconnect, Bytes: w.bytes, Rank: c.rank,
				Err: fmt.Errorf("re-register window %d at %#x: %w", h, uint64(w.ptr), err)}
		}
		w.h = nh
		b.userWins.m[h] = w
	}
	return nil
}

// releaseUserWindows deregisters the RegisterWindow windows left at Close. Caller
// holds regMu.
func (b *NCCL) releaseUserWindows(note func(string, error)) {
	c := b.c
	for _, w := range b.userWins.m {
		if c.comm != 0 {
			note("deregister window", c.d.CommWindowDeregister(c.comm, w.h))
		}
	}
	b.userWins.m = nil
}
