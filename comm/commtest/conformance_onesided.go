package commtest

import (
	"context"
	"errors"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/nccl"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// CapOneSided: PutSignal, Signal, WaitSignal and WindowUserPtr on registered windows
// (ncclPutSignal and friends, NCCL >= 2.29.2).
const CapOneSided Capability = "one-sided"

// oneSidedBackend is a backend with NCCL's one-sided calls (*nccl.Backend).
type oneSidedBackend interface {
	SymmetricAlloc(bytes int) (comm.DevicePtr, error)
	RegisterWindow(ctx context.Context, ptr comm.DevicePtr, bytes int, flags ...nccl.WindowFlag) (nccl.WindowHandle, error)
	PutSignal(src comm.DevicePtr, bytes, peer int, win nccl.WindowHandle, offset int, sig nccl.Signal, s comm.Stream) error
	Signal(peer int, sig nccl.Signal, s comm.Stream) error
	WaitSignal(waits []nccl.SignalWait, s comm.Stream) error
	WindowUserPtr(h nccl.WindowHandle) (comm.DevicePtr, error)
	Communicator() *nccl.Communicator
}

// oneSided checks the one-sided calls around a ring: each rank signals its successor
// once, then puts a tagged block into the successor's window at an offset of its own
// rank's choosing (with a signal) on a stream of its own; each rank waits for both
// signals from its predecessor on another stream, and then finds the block where it
// was put and the rest of its window untouched. A library without the calls answers
// ErrUnsupported on every rank.
func (e *env) oneSided(t *testing.T) {
	const window, block = 4096, 512
	bs := backendsAs[oneSidedBackend](t, e, CapOneSided, "the backend has no PutSignal")
	next := func(r int) int { return (r + 1) % e.n }
	prev := func(r int) int { return (r + e.n - 1) % e.n }
	errs := e.try(t, func(r int) error { return bs[r].Signal(next(r), nccl.Signal{}, 0) })
	for _, err := range errs {
		// A real NCCL without host RMA on this machine (no symmetric memory support, a
		// CUDA driver before 12.5) refuses the call itself.
		if errors.Is(err, rawnccl.InvalidUsage) || errors.Is(err, rawnccl.InvalidArgument) {
			e.h.lacking(t, CapOneSided, false, "the library refuses one-sided calls on this machine: "+err.Error())
			return
		}
	}
	if e.skipUnsupported(t, errs, CapOneSided, "signal") {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	mem := make([]comm.DevicePtr, e.n)
	inbox := make([]nccl.WindowHandle, e.n)
	e.all(t, func(r int) error {
		var err error
		if mem[r], err = bs[r].SymmetricAlloc(2 * window); err != nil {
			return err
		}
		if inbox[r], err = bs[r].RegisterWindow(ctx, mem[r], window); err != nil {
			return err
		}
		_, err = bs[r].RegisterWindow(ctx, mem[r]+window, window)
		return err
	})
	offset := func(r int) int { return (r%4)*block + 8 }
	for _, r := range e.ranks() {
		require.NoError(t, e.mem.Write(r, mem[r]+window, tagged(r, block)))
	}
	e.all(t, func(r int) error {
		s, err := e.inst.NewStream(r)
		if err != nil {
			return err
		}
		defer func() { _ = e.inst.DestroyStream(r, s) }()
		if err := bs[r].PutSignal(mem[r]+window, block, next(r), inbox[r], offset(r), nccl.Signal{}, s); err != nil {
			return err
		}
		w, err := e.inst.NewStream(r)
		if err != nil {
			return err
		}
		defer func() { _ = e.inst.DestroyStream(r, w) }()
		if err := bs[r].WaitSignal([]nccl.SignalWait{{Peer: prev(r), Count: 2}}, w); err != nil {
			return err
		}
		if err := e.inst.SyncStream(r, w); err != nil {
			return err
		}
		return e.inst.SyncStream(r, s)
	})
	for _, r := range e.ranks() {
		want := make([]byte, window)
		copy(want[offset(prev(r)):], tagged(prev(r), block))
		require.Equal(t, want, e.read(t, r, mem[r], window), "rank %d's window after rank %d's put", r, prev(r))
		p, err := bs[r].WindowUserPtr(inbox[r])
		require.NoError(t, err)
		require.Equal(t, mem[r], p, "window user pointer, rank %d", r)
	}
	e.all(t, func(r int) error { return bs[r].Communicator().Sync(ctx) })
}
