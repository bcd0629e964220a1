package comm

import (
	"context"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// Single is the Backend of a one-rank world: rank 0, world
// size 1, and every collective and point-to-point operation succeeds without doing
// anything, since a one-rank reduction, gather or broadcast leaves the buffer as it is.
// The other methods keep Base's defaults (RegisterBuffer returns handle 0,
// SymmetricAlloc is unsupported, groups do nothing, RecvCommandU32 always refuses:
// rank 0 is the only possible root). Bad input fails exactly as on the NCCL backend.
//
// The zero Single is rank 0 of a one-rank world without an element type: its
// reductions fail with ErrInvalidType (NewSingle with WithElementType gives one).
type Single struct {
	once sync.Once
	g    *core.Guard
}

// guard returns s's guard, made on first use for the zero Single.
func (s *Single) guard() *core.Guard {
	s.once.Do(func() {
		if s.g == nil {
			s.g = core.NewGuard(0, 1, core.ElemUnset)
		}
	})
	return s.g
}

// NewSingle returns a one-rank Backend. WithElementType, required (there is no
// default), sets the element type that sizes of reductions must be a multiple of.
func NewSingle(opts ...Option) (*Single, error) {
	cfg := newOptions(opts)
	if err := core.CheckWorld("single", 0, 1, cfg.elem, "comm.WithElementType"); err != nil {
		return nil, err
	}
	return &Single{g: core.NewGuard(0, 1, cfg.elem)}, nil
}

func init() { core.MarkChecked((*Single)(nil)) }

// AllReduce validates its arguments and does nothing.
func (s *Single) AllReduce(ptr DevicePtr, bytes int) error {
	return s.guard().Reduce(core.OpAllReduce, ptr, bytes)
}

// AllGather validates its arguments and does nothing.
func (s *Single) AllGather(send, recv DevicePtr, bytes int) error {
	return s.guard().Gather(core.OpAllGather, send, recv, bytes, false)
}

// ReduceScatter validates its arguments and does nothing.
func (s *Single) ReduceScatter(send, recv DevicePtr, bytes int) error {
	return s.guard().Gather(core.OpReduceScatter, send, recv, bytes, true)
}

// Broadcast validates its arguments and does nothing.
func (s *Single) Broadcast(ptr DevicePtr, bytes, root int) error {
	return s.guard().Broadcast(ptr, bytes, root)
}

// Barrier does nothing.
func (s *Single) Barrier() error { return s.guard().Open(core.OpBarrier) }

// SendTo validates its arguments (dest must be 0) and does nothing.
func (s *Single) SendTo(ptr DevicePtr, bytes, dest int, _ Stream) error {
	return s.guard().P2p(core.OpSend, "dest", ptr, bytes, dest)
}

// RecvFrom validates its arguments (src must be 0) and does nothing.
func (s *Single) RecvFrom(ptr DevicePtr, bytes, src int, _ Stream) error {
	return s.guard().P2p(core.OpRecv, "src", ptr, bytes, src)
}

// Rank returns 0.
func (s *Single) Rank() int { return 0 }

// WorldSize returns 1.
func (s *Single) WorldSize() int { return 1 }

// RecvCommandU32 always fails with ErrInvalidRank: the only root is this rank.
func (s *Single) RecvCommandU32(_ context.Context, ptr DevicePtr, root int) error {
	return s.guard().RecvCommand(ptr, root)
}

// AllReduceAsync validates its arguments and does nothing.
func (s *Single) AllReduceAsync(ptr DevicePtr, bytes int, _ Stream) error {
	return s.guard().ReduceAsync(ptr, bytes)
}

// RegisterBuffer validates its arguments and returns handle 0.
func (s *Single) RegisterBuffer(ptr DevicePtr, bytes int) (BufferHandle, error) {
	if err := s.guard().Register(ptr, bytes); err != nil {
		return 0, err
	}
	s.guard().Registered(0)
	return 0, nil
}

// DeregisterBuffer forgets one registration of h.
func (s *Single) DeregisterBuffer(h BufferHandle) error {
	_, err := s.guard().Deregister(h)
	return err
}

// SymmetricAlloc validates bytes and returns ErrUnsupported.
func (s *Single) SymmetricAlloc(bytes int) (DevicePtr, error) {
	if err := s.guard().SymAlloc(bytes); err != nil {
		return 0, err
	}
	return Base{}.SymmetricAlloc(bytes)
}

// SymmetricFree fails: Single never allocates, so every pointer is unknown.
func (s *Single) SymmetricFree(p DevicePtr) error {
	_, _, err := s.guard().SymFree(p)
	return err
}

// SetAddKernel validates k and ignores it.
func (s *Single) SetAddKernel(k Kernel) error { return s.guard().Kernel(k) }

// GroupStart opens a group level.
func (s *Single) GroupStart() error { return s.guard().GroupStart() }

// GroupEnd closes a group level.
func (s *Single) GroupEnd() error {
	_, err := s.guard().GroupEnd()
	return err
}

// IsHealthy reports whether s is still open.
func (s *Single) IsHealthy() bool { return !s.guard().IsClosed() }

// AttemptReconnect does nothing.
func (s *Single) AttemptReconnect(context.Context) error {
	return s.guard().OutsideGroup(core.OpAttemptReconnect)
}

// Close closes s; it reports a group left open with ErrGroupOpen.
func (s *Single) Close() error {
	open, err := s.guard().Close()
	if err != nil {
		return err
	}
	if open > 0 {
		return core.GroupLeftOpen(open)
	}
	return nil
}

// NoOp is the Communicator of a one-rank world: every
// operation validates its arguments and completes at once, leaving buffers as they are.
// It cannot split.
//
// The zero NoOp is ready to use, as NewNoOp's.
type NoOp struct {
	once sync.Once
	g    *core.Guard
}

// guard returns n's guard, made on first use for the zero NoOp.
func (n *NoOp) guard() *core.Guard {
	n.once.Do(func() {
		if n.g == nil {
			n.g = core.NewGuard(0, 1, BFloat16)
		}
	})
	return n.g
}

// NewNoOp returns a one-rank Communicator.
func NewNoOp() *NoOp { return &NoOp{g: core.NewGuard(0, 1, BFloat16)} }

// Rank returns 0.
func (n *NoOp) Rank() int { return 0 }

// WorldSize returns 1.
func (n *NoOp) WorldSize() int { return 1 }

// AllReduce validates its arguments and does nothing.
func (n *NoOp) AllReduce(ptr DevicePtr, count int, t DType, op ReduceOp) error {
	_, err := n.guard().TypedReduce(ptr, count, t, op)
	return err
}

// Broadcast validates its arguments and does nothing.
func (n *NoOp) Broadcast(ptr DevicePtr, count int, t DType, root int) error {
	_, err := n.guard().TypedBroadcast(ptr, count, t, root)
	return err
}

// AllGather validates its arguments and does nothing.
func (n *NoOp) AllGather(send, recv DevicePtr, count int, t DType) error {
	_, err := n.guard().TypedGather(core.OpAllGather, send, recv, count, t, Sum, false)
	return err
}

// ReduceScatter validates its arguments and does nothing.
func (n *NoOp) ReduceScatter(send, recv DevicePtr, count int, t DType, op ReduceOp) error {
	_, err := n.guard().TypedGather(core.OpReduceScatter, send, recv, count, t, op, true)
	return err
}

// Send validates its arguments and does nothing.
func (n *NoOp) Send(ptr DevicePtr, count int, t DType, dest int, _ uint32) error {
	_, err := n.guard().TypedP2P(core.OpSend, "dest", ptr, count, t, dest)
	return err
}

// Recv validates its arguments and does nothing.
func (n *NoOp) Recv(ptr DevicePtr, count int, t DType, src int, _ uint32) error {
	_, err := n.guard().TypedP2P(core.OpRecv, "src", ptr, count, t, src)
	return err
}

// Sync returns at once (or ctx's error).
func (n *NoOp) Sync(ctx context.Context) error {
	if err := n.guard().OutsideGroup(core.OpSync); err != nil {
		return err
	}
	return ctx.Err()
}

// Barrier returns at once (or ctx's error).
func (n *NoOp) Barrier(ctx context.Context) error {
	if err := n.guard().OutsideGroup(core.OpBarrier); err != nil {
		return err
	}
	return ctx.Err()
}

// Split returns ErrUnsupported.
func (n *NoOp) Split(_ context.Context, color, _ int) (Communicator, error) {
	if err := n.guard().OutsideGroup(core.OpSplit); err != nil {
		return nil, err
	}
	return nil, &ArgError{Op: core.OpSplit, Arg: "color", Value: color, Err: ErrUnsupported,
		Reason: fmt.Sprintf("%T cannot split", n)}
}

// GroupStart opens a group level.
func (n *NoOp) GroupStart() error { return n.guard().GroupStart() }

// GroupEnd closes a group level.
func (n *NoOp) GroupEnd() error {
	_, err := n.guard().GroupEnd()
	return err
}

// Close closes n.
func (n *NoOp) Close() error {
	_, err := n.guard().Close()
	return err
}
