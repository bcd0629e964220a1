package comm

import (
	"context"
	"errors"
	"fmt"
)

// checked is implemented by the backends that already run comm's validation.
type checked interface{ checked() }

// Validate puts comm's validation layer in front of a Backend written outside comm (for
// example a Base around a user's Core), so that it rejects bad input exactly as Single
// and the NCCL backend do: every argument error is an *ArgError wrapping a sentinel and
// never reaches b. It also tracks what misuse detection needs: Close (later calls fail
// with ErrClosed), group depth, live registration handles and symmetric pointers.
// Options: WithElementType says which element type b reduces (default BFloat16).
//
// A call that races with Close may still reach b; b must tolerate that. Backends made
// by comm are returned unchanged.
func Validate(b Backend, opts ...Option) (Backend, error) {
	if b == nil {
		return nil, errors.New("validate: backend is nil")
	}
	if _, ok := b.(checked); ok {
		return b, nil
	}
	cfg := newConfig(opts)
	world, rank := b.WorldSize(), b.Rank()
	if err := checkWorld("validate", rank, world, cfg.elem); err != nil {
		return nil, err
	}
	return &validated{b: b, g: newGuard(rank, world, cfg.elem)}, nil
}

type validated struct {
	b Backend
	g *guard
}

func (*validated) checked() {}

func (v *validated) AllReduce(ptr DevicePtr, bytes int) error {
	if err := v.g.reduce(opAllReduce, ptr, bytes); err != nil {
		return err
	}
	return v.b.AllReduce(ptr, bytes)
}

func (v *validated) AllGather(send, recv DevicePtr, bytes int) error {
	if err := v.g.gather(opAllGather, send, recv, bytes, false); err != nil {
		return err
	}
	return v.b.AllGather(send, recv, bytes)
}

func (v *validated) ReduceScatter(send, recv DevicePtr, bytes int) error {
	if err := v.g.gather(opReduceScatter, send, recv, bytes, true); err != nil {
		return err
	}
	return v.b.ReduceScatter(send, recv, bytes)
}

func (v *validated) Broadcast(ptr DevicePtr, bytes, root int) error {
	if err := v.g.broadcast(ptr, bytes, root); err != nil {
		return err
	}
	return v.b.Broadcast(ptr, bytes, root)
}

func (v *validated) Barrier() error {
	if err := v.g.open(opBarrier); err != nil {
		return err
	}
	return v.b.Barrier()
}

func (v *validated) SendTo(ptr DevicePtr, bytes, dest int, s Stream) error {
	if err := v.g.p2p(opSend, "dest", ptr, bytes, dest); err != nil {
		return err
	}
	return v.b.SendTo(ptr, bytes, dest, s)
}

func (v *validated) RecvFrom(ptr DevicePtr, bytes, src int, s Stream) error {
	if err := v.g.p2p(opRecv, "src", ptr, bytes, src); err != nil {
		return err
	}
	return v.b.RecvFrom(ptr, bytes, src, s)
}

func (v *validated) Rank() int      { return v.g.rank }
func (v *validated) WorldSize() int { return v.g.world }

func (v *validated) RecvCommandU32(ctx context.Context, ptr DevicePtr, root int) error {
	if err := v.g.recvCommand(ptr, root); err != nil {
		return err
	}
	return v.b.RecvCommandU32(ctx, ptr, root)
}

func (v *validated) AllReduceAsync(ptr DevicePtr, bytes int, compute Stream) error {
	if err := v.g.reduceAsync(ptr, bytes); err != nil {
		return err
	}
	return v.b.AllReduceAsync(ptr, bytes, compute)
}

func (v *validated) RegisterBuffer(ptr DevicePtr, bytes int) (BufferHandle, error) {
	if err := v.g.register(ptr, bytes); err != nil {
		return 0, err
	}
	h, err := v.b.RegisterBuffer(ptr, bytes)
	if err != nil {
		return 0, err
	}
	v.g.registered(h)
	return h, nil
}

func (v *validated) DeregisterBuffer(h BufferHandle) error {
	undo, err := v.g.deregister(h)
	if err != nil {
		return err
	}
	if err := v.b.DeregisterBuffer(h); err != nil {
		undo()
		return err
	}
	return nil
}

func (v *validated) SymmetricAlloc(bytes int) (DevicePtr, error) {
	if err := v.g.symAlloc(bytes); err != nil {
		return 0, err
	}
	p, err := v.b.SymmetricAlloc(bytes)
	if err != nil {
		return 0, err
	}
	if p == 0 {
		return 0, &OpError{Op: opSymmetricAlloc, Bytes: bytes, Rank: v.g.rank,
			Err: fmt.Errorf("backend returned a null pointer")}
	}
	v.g.allocated(p, bytes)
	return p, nil
}

func (v *validated) SymmetricFree(p DevicePtr) error {
	_, undo, err := v.g.symFree(p)
	if err != nil {
		return err
	}
	if err := v.b.SymmetricFree(p); err != nil {
		undo()
		return err
	}
	return nil
}

func (v *validated) SetAddKernel(k Kernel) error {
	if err := v.g.kernel(k); err != nil {
		return err
	}
	return v.b.SetAddKernel(k)
}

func (v *validated) GroupStart() error {
	if err := v.g.groupStart(); err != nil {
		return err
	}
	if err := v.b.GroupStart(); err != nil {
		_, _ = v.g.groupEnd()
		return err
	}
	return nil
}

func (v *validated) GroupEnd() error {
	if _, err := v.g.groupEnd(); err != nil {
		return err
	}
	return v.b.GroupEnd()
}

func (v *validated) IsHealthy() bool { return !v.g.isClosed() && v.b.IsHealthy() }

func (v *validated) AttemptReconnect(ctx context.Context) error {
	if err := v.g.outsideGroup(opAttemptReconnect); err != nil {
		return err
	}
	return v.b.AttemptReconnect(ctx)
}

func (v *validated) Close() error {
	open, err := v.g.close()
	if err != nil {
		return err
	}
	err = v.b.Close()
	if open > 0 {
		err = errors.Join(groupLeftOpen(open), err)
	}
	return err
}
