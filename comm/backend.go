package comm

import (
	"context"
	"io"

	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// Backend is the engine-facing set of collective and point-to-point operations on device
// pointers and byte counts. Reductions sum elements of the
// backend's element type, fixed at construction (every constructor requires it: there
// is no default). Implementations
// are safe for concurrent use; operations on one backend are issued in call order, and
// every rank must issue the same collectives in the same order.
//
// Zero bytes is valid for every data operation (a null pointer is then allowed).
//
// Inside a group (between GroupStart and GroupEnd on the calling goroutine, in
// InGroup's function, in a Group's Add) the blocking collectives (AllReduce,
// AllGather, ReduceScatter, Broadcast) of a backend whose groups defer work (NCCL)
// check their arguments, record the operation and return nil at once: the buffer
// holds the result only once the outermost GroupEnd (or Submit) has returned nil,
// which launches and waits for them. A collective cannot tell a group whose GroupEnd
// is coming from one that was forgotten, since NCCL's own pattern (GroupStart, the
// calls, GroupEnd) makes both look alike at the call. A forgotten GroupEnd is
// reported by the next call on that goroutine that cannot join a group (Sync,
// AllReduceAsync, Split, SymmetricAlloc, a Group's Add: ErrGroupOpen) and by Close
// (ErrGroupOpen; on the goroutine that opened the group Close first ends it, which
// launches its calls; a group of a goroutine that ended is never launched). Engines
// avoid it by using InGroup or Group values, which cannot leave a group open.
type Backend interface {
	// AllReduce sums bytes at ptr across all ranks, in place; every rank gets the
	// result. bytes must be a multiple of the element size. The host waits for the
	// result. The work that produced ptr must be complete (callers synchronize
	// their stream first); AllReduceAsync orders on the device instead.
	AllReduce(ptr DevicePtr, bytes int) error
	// AllGather gathers bytes from send on every rank into recv, in rank order: recv
	// holds WorldSize()*bytes bytes. It is in place when send == recv+Rank()*bytes.
	AllGather(send, recv DevicePtr, bytes int) error
	// ReduceScatter sums the WorldSize()*bytes bytes at send across ranks and leaves
	// rank r's bytes-sized share (block r) at recv. It reduces elements of the element
	// type, like AllReduce (not bytes as u8).
	ReduceScatter(send, recv DevicePtr, bytes int) error
	// Broadcast copies bytes at ptr on rank root to ptr on every rank, in place.
	Broadcast(ptr DevicePtr, bytes, root int) error
	// Barrier is the backend's cheap barrier. On NCCL it enqueues a zero-count all-reduce on the
	// communication stream and returns without waiting. NCCL completes a zero-count
	// collective at once without contacting the peers, so this neither blocks the host
	// nor synchronises the ranks: it keeps the contract (every rank calls it, it
	// checks the communicator's state) and nothing more. Communicator.Barrier is the real,
	// blocking barrier.
	Barrier() error
	// SendTo sends bytes at ptr to rank dest, enqueued on stream s. It pairs with a
	// RecvFrom of the same size on dest; exchanges that must progress together belong
	// in one GroupStart/GroupEnd on both sides.
	SendTo(ptr DevicePtr, bytes, dest int, s Stream) error
	// RecvFrom receives bytes into ptr from rank src, enqueued on stream s. It pairs with
	// a SendTo of the same size on src.
	RecvFrom(ptr DevicePtr, bytes, src int, s Stream) error
	// Rank is this rank's index, from 0.
	Rank() int
	// WorldSize is the number of ranks.
	WorldSize() int

	// RecvCommandU32 receives, on a non-root rank, the first 4-byte word of the next
	// worker command from root into ptr: the receive side of a 4-byte Broadcast. It may
	// wait as long as ctx allows, checking the transport for errors while it waits, and
	// returns the first error it sees. Calling it on root is an ErrInvalidRank error.
	RecvCommandU32(ctx context.Context, ptr DevicePtr, root int) error
	// AllReduceAsync is AllReduce ordered on the device against stream compute: the
	// reduction starts after the work already queued on compute, and work queued on
	// compute later waits for it. The host does not wait.
	AllReduceAsync(ptr DevicePtr, bytes int, compute Stream) error
	// RegisterBuffer registers a device buffer with the backend (ncclCommRegister on
	// NCCL) and returns a handle for DeregisterBuffer.
	RegisterBuffer(ptr DevicePtr, bytes int) (BufferHandle, error)
	// DeregisterBuffer releases a handle from RegisterBuffer.
	DeregisterBuffer(h BufferHandle) error
	// SymmetricAlloc allocates bytes of device memory from the backend's allocator
	// (ncclMemAlloc on NCCL). It is local: no other rank takes part (on NCCL, the
	// collective registration as a symmetric window is nccl.Backend.RegisterWindow). Backends
	// without an allocator return ErrUnsupported.
	SymmetricAlloc(bytes int) (DevicePtr, error)
	// SymmetricFree frees a pointer from SymmetricAlloc.
	SymmetricFree(p DevicePtr) error
	// SetAddKernel hands the backend the in-place add kernel of its element type (the
	// bf16 one by default); the NCCL backend of a 2-rank world then takes a send/recv
	// + add all-reduce path for small messages.
	SetAddKernel(k Kernel) error
	// GroupStart opens a group on the calling goroutine: the operations it issues up to
	// the matching GroupEnd, which it must call itself, are submitted together
	// (ncclGroupStart/End on NCCL, in one cgo crossing). Groups nest. On NCCL the group
	// covers the goroutine's operations on every backend and communicator of the process
	// (NCCL keeps group state per OS thread) and is keyed by the runtime's goroutine id,
	// which no other goroutine ever gets: a goroutine that ends inside a group leaves
	// nothing another goroutine can see. Blocking collectives inside it complete at the
	// outermost GroupEnd. Prefer a [Group] value, or [InGroup], which never leaves a
	// group open.
	GroupStart() error
	// GroupEnd closes the group opened by GroupStart. On NCCL a call NCCL rejects inside
	// the group is reported here, naming the operation (see nccl.Communicator.GroupEnd).
	GroupEnd() error
	// IsHealthy is false after the backend saw a transport error or a completion
	// timeout, until a successful AttemptReconnect, and after Close.
	IsHealthy() bool
	// AttemptReconnect replaces a failed communicator; every rank must call it at the
	// same time.
	AttemptReconnect(ctx context.Context) error
	// Close releases the backend: a bounded best-effort wait for pending work, then
	// teardown. Errors are logged and returned; Close never panics. Every later call
	// returns ErrClosed.
	Close() error
}

// Core is the part of Backend that every implementation must write itself. [Base] adds
// the rest with defaults.
type Core interface {
	AllReduce(ptr DevicePtr, bytes int) error
	AllGather(send, recv DevicePtr, bytes int) error
	ReduceScatter(send, recv DevicePtr, bytes int) error
	Broadcast(ptr DevicePtr, bytes, root int) error
	Barrier() error
	SendTo(ptr DevicePtr, bytes, dest int, s Stream) error
	RecvFrom(ptr DevicePtr, bytes, src int, s Stream) error
	Rank() int
	WorldSize() int
}

// Base completes a Core into a Backend with defaults for the other methods. Go embedding
// cannot call back into the embedding type, so Base holds the Core explicitly:
//
//	type myBackend struct{ comm.Base } // Base.Core = the type with the required methods
//
// or simply comm.Base{Core: c}. A type that embeds Base and defines, say, its own
// AllReduceAsync overrides that default. Base does not validate: wrap the result with
// [Validate].
type Base struct {
	Core
}

// RecvCommandU32 refuses root == Rank() and otherwise calls Broadcast(ptr, 4, root).
func (b Base) RecvCommandU32(ctx context.Context, ptr DevicePtr, root int) error {
	if root == b.Rank() {
		return core.ArgErr(core.OpRecvCommand, "root", root, ErrInvalidRank, "root is this rank")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.Broadcast(ptr, 4, root)
}

// AllReduceAsync ignores compute and calls AllReduce.
func (b Base) AllReduceAsync(ptr DevicePtr, bytes int, _ Stream) error {
	return b.AllReduce(ptr, bytes)
}

// RegisterBuffer registers nothing and returns handle 0.
func (Base) RegisterBuffer(DevicePtr, int) (BufferHandle, error) { return 0, nil }

// DeregisterBuffer does nothing.
func (Base) DeregisterBuffer(BufferHandle) error { return nil }

// SymmetricAlloc returns ErrUnsupported.
func (Base) SymmetricAlloc(bytes int) (DevicePtr, error) {
	return 0, core.ArgErr(core.OpSymmetricAlloc, "bytes", bytes, ErrUnsupported, "backend has no symmetric allocator")
}

// SymmetricFree returns ErrUnsupported.
func (Base) SymmetricFree(p DevicePtr) error {
	return core.ArgErr(core.OpSymmetricFree, "ptr", p, ErrUnsupported, "backend has no symmetric allocator")
}

// SetAddKernel ignores the kernel.
func (Base) SetAddKernel(Kernel) error { return nil }

// GroupStart does nothing.
func (Base) GroupStart() error { return nil }

// GroupEnd does nothing.
func (Base) GroupEnd() error { return nil }

// IsHealthy returns true.
func (Base) IsHealthy() bool { return true }

// AttemptReconnect does nothing.
func (Base) AttemptReconnect(context.Context) error { return nil }

// Close closes the Core if it is an io.Closer and otherwise does nothing.
func (b Base) Close() error {
	if c, ok := b.Core.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
