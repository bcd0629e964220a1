package core

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every argument error comm returns is an [*ArgError] wrapping one of
// them; test with errors.Is.
var (
	// ErrInvalidRank: a rank, root, destination or source outside [0, world size), or a
	// root that the operation does not allow (RecvCommandU32 on the root itself).
	ErrInvalidRank = errors.New("invalid rank")
	// ErrInvalidSize: a negative size or count, a size that is not a multiple of the
	// element size, a size that overflows, or zero where a buffer is required.
	ErrInvalidSize = errors.New("invalid size")
	// ErrNullPointer: a null device pointer (or kernel) where a non-empty buffer is needed,
	// or any pointer into the null page (below 4096), where no buffer lies.
	ErrNullPointer = errors.New("null pointer")
	// ErrMisaligned: a device pointer of an element-typed reduction that is not a
	// multiple of the element size (a bfloat16 buffer at an odd address). Every backend
	// rejects it, so a rank never reaches the library with it.
	ErrMisaligned = errors.New("misaligned pointer")
	// ErrInvalidType: a DType that is not one of comm's element types.
	ErrInvalidType = errors.New("invalid element type")
	// ErrInvalidOp: a ReduceOp that is not one of comm's operators.
	ErrInvalidOp = errors.New("invalid reduce operation")
	// ErrClosed: the backend or communicator was closed.
	ErrClosed = errors.New("closed")
	// ErrGroupNotOpen: GroupEnd without a matching GroupStart.
	ErrGroupNotOpen = errors.New("no group open")
	// ErrGroupOpen: an operation that cannot be part of a group (it waits, allocates or
	// re-creates the communicator) was called between GroupStart and GroupEnd, or Close
	// found a group still open.
	ErrGroupOpen = errors.New("group open")
	// ErrUnknownHandle: a handle that RegisterBuffer did not return, or already
	// deregistered.
	ErrUnknownHandle = errors.New("unknown buffer handle")
	// ErrUnknownPointer: a pointer that SymmetricAlloc did not return, or already freed.
	ErrUnknownPointer = errors.New("unknown symmetric pointer")
	// ErrUnsupported: the backend (or the loaded NCCL) does not offer the operation. It
	// is errors.ErrUnsupported, so either name matches.
	ErrUnsupported = errors.ErrUnsupported
	// ErrUnhealthy: the communicator saw a transport error or a completion timeout;
	// only AttemptReconnect or Close are useful now.
	ErrUnhealthy = errors.New("communicator unhealthy")
	// ErrTimeout: an operation did not complete within the operation timeout
	// (WithTimeout). The communicator is unhealthy afterwards.
	ErrTimeout = errors.New("operation timed out")
)

// ArgError reports an invalid argument: which operation, on which rank where one is
// known, which argument, its value, and the sentinel it violates. Its message reads
// "all-reduce on rank 1: bytes -3: invalid size" ("all-reduce: bytes -3: invalid size"
// without a rank).
type ArgError struct {
	// Op is the operation, in words: "all-reduce", "send", "deregister-buffer".
	Op string
	// Rank is the calling rank, in the communicator the operation was called on, when
	// HasRank is set: the backends set both for the checks they make.
	Rank    int
	HasRank bool
	// Arg names the argument: "bytes", "root", "ptr", "handle".
	Arg string
	// Value is the argument's value.
	Value any
	// Err is one of the sentinels above.
	Err error
	// Reason optionally says more ("not a multiple of 2 (bfloat16)").
	Reason string
}

// Error returns "op on rank N: arg value: sentinel" ("op: ..." without a rank), followed
// by ": reason" when there is one.
func (e *ArgError) Error() string {
	op := e.Op
	if e.HasRank {
		op = fmt.Sprintf("%s on rank %d", e.Op, e.Rank)
	}
	msg := fmt.Sprintf("%s: %s %v: %v", op, e.Arg, e.Value, e.Err)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Unwrap returns the sentinel.
func (e *ArgError) Unwrap() error { return e.Err }

func ArgErr(op, arg string, value any, err error, reason string) error {
	return &ArgError{Op: op, Arg: arg, Value: value, Err: err, Reason: reason}
}

// OpError reports a failure of the library underneath while an operation ran, e.g.
// "all-reduce of 4096 bytes on rank 1: ncclRemoteError". Err is the library's error
// (reachable with errors.As as the driver's type) or one of comm's sentinels.
type OpError struct {
	// Op is the operation, in words.
	Op string
	// Bytes is the size the operation was called with, or -1 where none applies.
	Bytes int
	// Rank is the calling rank, in the communicator the operation ran on.
	Rank int
	// GlobalRank is the calling rank in the world the communicator was split or shrunk
	// from (Rank for a communicator made by a constructor).
	GlobalRank int
	// Name is the communicator's name (nccl.WithName), "" for none.
	Name string
	// Peer is the other rank of a point-to-point operation (Op "send" or "recv"); it
	// is not used for other operations.
	Peer int
	// Err is the underlying error: for a failure of NCCL, an error that matches raw's
	// nccl.Result with errors.Is (errors.Is(err, nccl.RemoteError)) and whose message
	// carries NCCL's own text (ncclGetLastError); once the communicator is unhealthy,
	// also ErrUnhealthy.
	Err error
}

// Error returns "op of N bytes on rank R: cause" (without the size where none applies),
// with " (global rank G)" when the communicator is a split or shrunk one where G
// differs from R, ` of communicator "name"` when it has a name, and "to rank P" or
// "from rank P" for a send or receive. A timeout says what was waited for.
func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	if e.Bytes >= 0 {
		fmt.Fprintf(&b, " of %d bytes", e.Bytes)
	}
	fmt.Fprintf(&b, " on rank %d", e.Rank)
	if e.GlobalRank != e.Rank {
		fmt.Fprintf(&b, " (global rank %d)", e.GlobalRank)
	}
	if e.Name != "" {
		fmt.Fprintf(&b, " of communicator %q", e.Name)
	}
	switch e.Op {
	case OpSend:
		fmt.Fprintf(&b, " to rank %d", e.Peer)
	case OpRecv:
		fmt.Fprintf(&b, " from rank %d", e.Peer)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if errors.Is(e.Err, ErrTimeout) {
		if hint := timeoutHint(e.Op); hint != "" {
			b.WriteString(" (" + hint + ")")
		}
	}
	return b.String()
}

// timeoutHint says what an operation that timed out was waiting for.
func timeoutHint(op string) string {
	switch op {
	case OpSend, OpRecv:
		return "a send waits for the matching receive on its peer, and a receive for the matching send"
	case OpSync:
		return "the operations submitted so far had not completed: each collective among them waits for every rank to join it, each send or receive for its peer's match"
	case OpSplit, "shrink", OpInit, OpAttemptReconnect, "rendezvous":
		return "every rank of the communicator must make this call"
	case OpGroupEnd:
		return "the group's operations had not completed: each waits for its peers' matching calls"
	case OpClose, OpRecvCommand:
		return ""
	}
	return "a collective waits until every rank joins it: every rank must make the same collective calls in the same order"
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }
