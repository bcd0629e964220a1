package comm

import (
	"context"
)

// Communicator is the typed interface: element counts with a
// DType and ReduceOp per call. Operations are stream-ordered on the communicator's own
// stream and may return before they complete; call Sync (or Barrier) before reading a
// result or reusing a buffer. Like Backend it is safe for concurrent use, but the order
// of operations submitted concurrently is unspecified: serialise them to keep every rank
// in the same order.
//
// Close is bounded: a best-effort Sync, errors logged
// through log/slog and returned, never a panic; later calls return ErrClosed.
type Communicator interface {
	// Rank is this rank's index, from 0.
	Rank() int
	// WorldSize is the number of ranks.
	WorldSize() int
	// AllReduce reduces count elements at ptr across ranks with op, in place. Unlike
	// Backend.AllReduce it only enqueues: the result exists after Sync.
	AllReduce(ptr DevicePtr, count int, t DType, op ReduceOp) error
	// Broadcast copies count elements at ptr on root to every rank, in place.
	Broadcast(ptr DevicePtr, count int, t DType, root int) error
	// AllGather gathers count elements from send on every rank into recv (count *
	// WorldSize() elements), in rank order.
	AllGather(send, recv DevicePtr, count int, t DType) error
	// ReduceScatter reduces count*WorldSize() elements at send across ranks and leaves
	// rank r's block of count elements at recv.
	ReduceScatter(send, recv DevicePtr, count int, t DType, op ReduceOp) error
	// AllReduceInto reduces count elements at send across ranks with op into recv (out
	// of place; send == recv is the in-place AllReduce).
	AllReduceInto(send, recv DevicePtr, count int, t DType, op ReduceOp) error
	// BroadcastInto copies count elements at send on root to recv on every rank (send
	// is used on root only; send == recv is the in-place Broadcast).
	BroadcastInto(send, recv DevicePtr, count int, t DType, root int) error
	// Reduce reduces count elements at send across ranks with op into recv on root
	// (recv is used on root only).
	Reduce(send, recv DevicePtr, count int, t DType, op ReduceOp, root int) error
	// AllToAll sends block j (count elements at send + j*count) to rank j and receives
	// rank i's block into recv + i*count; send and recv hold count * WorldSize()
	// elements and must not overlap.
	AllToAll(send, recv DevicePtr, count int, t DType) error
	// AllToAllv is AllToAll with per-peer counts and displacements, in elements: it
	// sends sendCounts[j] elements at send + sendDispls[j] to rank j and receives
	// recvCounts[i] elements from rank i at recv + recvDispls[i]. Every slice has
	// WorldSize() entries, rank i's sendCounts[j] must equal rank j's recvCounts[i],
	// and the two buffers must not overlap.
	AllToAllv(send DevicePtr, sendCounts, sendDispls []int, recv DevicePtr, recvCounts, recvDispls []int, t DType) error
	// Gather collects count elements at send from every rank into recv on root, in
	// rank order (recv holds count * WorldSize() elements and is used on root only).
	Gather(send, recv DevicePtr, count int, t DType, root int) error
	// Scatter sends block i of root's send (count elements at send + i*count; used on
	// root only) to rank i's recv.
	Scatter(send, recv DevicePtr, count int, t DType, root int) error
	// Send sends count elements at ptr to dest. The tag is accepted for other
	// transports and ignored by NCCL, which matches by submission order.
	Send(ptr DevicePtr, count int, t DType, dest int, tag uint32) error
	// Recv receives count elements into ptr from src. The tag is ignored by NCCL.
	Recv(ptr DevicePtr, count int, t DType, src int, tag uint32) error
	// Sync waits, as long as ctx allows, until every operation submitted so far has
	// completed: results are readable and inputs reusable.
	Sync(ctx context.Context) error
	// Barrier waits until every rank has reached it; it implies Sync. (Backend.Barrier
	// is not a barrier: it synchronises nothing.)
	Barrier(ctx context.Context) error
	// Split creates sub-communicators collectively: ranks passing the same color join
	// one, ordered by key. A negative color joins none and returns (nil, nil). Backends
	// that cannot split return (nil, ErrUnsupported).
	Split(ctx context.Context, color, key int) (Communicator, error)
	// GroupStart opens a group: the operations up to the matching GroupEnd are
	// submitted together, so that a two-way exchange (Send and Recv on both sides)
	// progresses instead of deadlocking. Groups nest. On NCCL the group is the calling
	// goroutine's (locked to its OS thread until the matching GroupEnd, keyed by its
	// goroutine id, never inherited) and covers every NCCL communicator of the process;
	// operations that wait (Sync, Barrier, Split) fail with ErrGroupOpen inside it.
	// One-rank communicators count levels only. See also [Group] and [InGroup].
	GroupStart() error
	// GroupEnd closes the innermost group opened by GroupStart; the outermost one
	// submits the group's operations (on NCCL in one cgo crossing, reporting there a
	// call NCCL rejects, naming its operation). Without a group open it fails with
	// ErrGroupNotOpen.
	GroupEnd() error
	// Close releases the communicator.
	Close() error
}

// StreamSyncer is the optional capability of a Communicator that runs on its own CUDA
// stream: ordering compute and communication on the device
// without the host waiting. Discover it with a type assertion:
//
//	if ss, ok := c.(comm.StreamSyncer); ok { ... }
type StreamSyncer interface {
	// CommStream is the stream the communicator enqueues its operations on.
	CommStream() Stream
	// WaitForStream makes communication submitted from now on wait for the work
	// already queued on s (an event recorded on s, waited on by CommStream).
	WaitForStream(s Stream) error
	// MakeStreamWait makes work queued on s from now on wait for the communication
	// already submitted (an event recorded on CommStream, waited on by s).
	MakeStreamWait(s Stream) error
}
