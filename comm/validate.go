package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// Validate puts comm's validation layer in front of a Backend written outside comm (for
// example a Base around a user's Core), so that it rejects bad input exactly as Single
// and the NCCL backend do: every argument error is an *ArgError wrapping a sentinel and
// never reaches b. It also tracks what misuse detection needs: Close (later calls fail
// with ErrClosed), group depth, live registration handles and symmetric pointers.
// Options: WithElementType says which element type b reduces; it is required (there
// is no default).
//
// A call that races with Close may still reach b; b must tolerate that. Backends made
// by comm (Single, the NCCL and MPI backends, an earlier Validate's) are returned
// unchanged; WithElementType may then be given only when it names the element type
// the backend already has (a backend with an ElementType method): another is
// ErrInvalidType, never dropped.
func Validate(b Backend, opts ...Option) (Backend, error) {
	if b == nil {
		return nil, errors.New("validate: backend is nil")
	}
	cfg := newOptions(opts)
	if core.IsChecked(b) {
		if cfg.elem == core.ElemUnset {
			return b, nil
		}
		if et, ok := b.(interface{ ElementType() DType }); ok && et.ElementType() != cfg.elem {
			return nil, &ArgError{Op: "validate", Arg: "element type", Value: int32(cfg.elem), Err: ErrInvalidType,
				Reason: fmt.Sprintf("the backend reduces %v", et.ElementType())}
		}
		return b, nil
	}
	world, rank := b.WorldSize(), b.Rank()
	if err := core.CheckWorld("validate", rank, world, cfg.elem, "comm.WithElementType"); err != nil {
		return nil, err
	}
	return &validated{b: b, g: core.NewGuard(rank, world, cfg.elem)}, nil
}

type validated struct {
	b Backend
	g *core.Guard
}

func init() { core.MarkChecked((*validated)(nil)) }

func (v *validated) AllReduce(ptr DevicePtr, bytes int) error {
	if err := v.g.Reduce(core.OpAllReduce, ptr, bytes); err != nil {
		return err
	}
	return v.b.AllReduce(ptr, bytes)
}

func (v *validated) AllGather(send, recv DevicePtr, bytes int) error {
	if err := v.g.Gather(core.OpAllGather, send, recv, bytes, false); err != nil {
		return err
	}
	return v.b.AllGather(send, recv, bytes)
}

func (v *validated) ReduceScatter(send, recv DevicePtr, bytes int) error {
	if err := v.g.Gather(core.OpReduceScatter, send, recv, bytes, true); err != nil {
		return err
	}
	return v.b.ReduceScatter(send, recv, bytes)
}

func (v *validated) Broadcast(ptr DevicePtr, bytes, root int) error {
	if err := v.g.Broadcast(ptr, bytes, root); err != nil {
		return err
	}
	return v.b.Broadcast(ptr, bytes, root)
}

func (v *validated) Barrier() error {
	if err := v.g.Open(core.OpBarrier); err != nil {
		return err
	}
	return v.b.Barrier()
}

func (v *validated) SendTo(ptr DevicePtr, bytes, dest int, s Stream) error {
	if err := v.g.P2p(core.OpSend, "dest", ptr, bytes, dest); err != nil {
		return err
	}
	return v.b.SendTo(ptr, bytes, dest, s)
}

func (v *validated) RecvFrom(ptr DevicePtr, bytes, src int, s Stream) error {
	if err := v.g.P2p(core.OpRecv, "src", ptr, bytes, src); err != nil {
		return err
	}
	return v.b.RecvFrom(ptr, bytes, src, s)
}

func (v *validated) Rank() int      { return v.g.Rank }
func (v *validated) WorldSize() int { return v.g.World }

func (v *validated) RecvCommandU32(ctx context.Context, ptr DevicePtr, root int) error {
	if err := v.g.RecvCommand(ptr, root); err != nil {
		return err
	}
	return v.b.RecvCommandU32(ctx, ptr, root)
}

func (v *validated) AllReduceAsync(ptr DevicePtr, bytes int, compute Stream) error {
	if err := v.g.ReduceAsync(ptr, bytes); err != nil {
		return err
	}
	return v.b.AllReduceAsync(ptr, bytes, compute)
}

func (v *validated) RegisterBuffer(ptr DevicePtr, bytes int) (BufferHandle, error) {
	if err := v.g.Register(ptr, bytes); err != nil {
		return 0, err
	}
	h, err := v.b.RegisterBuffer(ptr, bytes)
	if err != nil {
		return 0, err
	}
	v.g.Registered(h)
	return h, nil
}

func (v *validated) DeregisterBuffer(h BufferHandle) error {
	undo, err := v.g.Deregister(h)
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
	if err := v.g.SymAlloc(bytes); err != nil {
		return 0, err
	}
	p, err := v.b.SymmetricAlloc(bytes)
	if err != nil {
		return 0, err
	}
	if p == 0 {
		return 0, &OpError{Op: core.OpSymmetricAlloc, Bytes: bytes, Rank: v.g.Rank, GlobalRank: v.g.Rank,
			Err: fmt.Errorf("backend returned a null pointer")}
	}
	v.g.Allocated(p, bytes)
	return p, nil
}

func (v *validated) SymmetricFree(p DevicePtr) error {
	_, undo, err := v.g.SymFree(p)
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
	if err := v.g.Kernel(k); err != nil {
		return err
	}
	return v.b.SetAddKernel(k)
}

func (v *validated) GroupStart() error {
	if err := v.g.GroupStart(); err != nil {
		return err
	}
	if err := v.b.GroupStart(); err != nil {
		_, _ = v.g.GroupEnd()
		return err
	}
	return nil
}

func (v *validated) GroupEnd() error {
	if _, err := v.g.GroupEnd(); err != nil {
		return err
	}
	return v.b.GroupEnd()
}

func (v *validated) IsHealthy() bool { return !v.g.IsClosed() && v.b.IsHealthy() }

func (v *validated) AttemptReconnect(ctx context.Context) error {
	if err := v.g.OutsideGroup(core.OpAttemptReconnect); err != nil {
		return err
	}
	return v.b.AttemptReconnect(ctx)
}

func (v *validated) Close() error {
	open, err := v.g.Close()
	if err != nil {
		return err
	}
	err = v.b.Close()
	if open > 0 {
		err = errors.Join(core.GroupLeftOpen(open), err)
	}
	return err
}
