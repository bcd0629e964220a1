package comm

import "github.com/ncclgo/ncclgo/comm/internal/core"

// The types and errors every backend shares. They are defined in an internal package
// that the backend packages (comm/nccl, comm/mpi) also build on, and are the same types
// here: a comm.DevicePtr is a core.DevicePtr, and errors.Is matches the sentinels below
// whichever package returned the error.

// DevicePtr is a device address (a CUDA CUdeviceptr). 0 is the null pointer.
type DevicePtr = core.DevicePtr

// Stream is a CUDA stream handle (CUstream, the same value as cudaStream_t). 0 is the
// legacy default stream.
type Stream = core.Stream

// Kernel is a CUDA kernel handle (CUfunction), as passed to Backend.SetAddKernel.
type Kernel = core.Kernel

// BufferHandle identifies a registration made by Backend.RegisterBuffer.
type BufferHandle = core.BufferHandle

// UniqueID is NCCL's ncclUniqueId: 128 opaque bytes created by one rank and shared with
// every other rank of the communicator before construction.
type UniqueID = core.UniqueID

// DType is the element type of a buffer. Its values are NCCL's ncclDataType_t numbers.
type DType = core.DType

// ReduceOp is a reduction operator. Its values are NCCL's ncclRedOp_t numbers.
type ReduceOp = core.ReduceOp

// ArgError reports an invalid argument: which operation, on which rank where one is
// known (the backends' checks name the calling rank), which argument, its value, and the
// sentinel it violates. Its message reads "all-reduce on rank 1: bytes -3: invalid size".
type ArgError = core.ArgError

// MismatchError is the collective check's verdict (nccl.WithCollectiveCheck,
// mpi.WithCollectiveCheck): the ranks did not call the same collective with the same
// count, element type, root and reduction. It names two ranks and their calls
// (Signature), lists every rank that differs, and matches ErrMismatch. Every rank of
// the communicator gets the same one.
type MismatchError = core.MismatchError

// Signature is one rank's call as the collective check compares it.
type Signature = core.Signature

// OpError reports a failure of the library underneath while an operation ran, e.g.
// "all-reduce of 4096 bytes on rank 1: ncclRemoteError". Err is the library's error
// (reachable with errors.As as the driver's type) or one of comm's sentinels.
type OpError = core.OpError

// Element types (NCCL's ncclDataType_t numbers).
const (
	Int8       = core.Int8
	Uint8      = core.Uint8
	Int32      = core.Int32
	Uint32     = core.Uint32
	Int64      = core.Int64
	Uint64     = core.Uint64
	Float16    = core.Float16
	Float32    = core.Float32
	Float64    = core.Float64
	BFloat16   = core.BFloat16
	Float8E4M3 = core.Float8E4M3
	Float8E5M2 = core.Float8E5M2
)

// Reduction operators (NCCL's ncclRedOp_t numbers).
const (
	Sum  = core.Sum
	Prod = core.Prod
	Max  = core.Max
	Min  = core.Min
	Avg  = core.Avg
)

// Sentinel errors. Every argument error comm returns is an [*ArgError] wrapping one of
// them; test with errors.Is.
var (
	// ErrInvalidRank: a rank, root, destination or source outside [0, world size), or a
	// root that the operation does not allow (RecvCommandU32 on the root itself).
	ErrInvalidRank = core.ErrInvalidRank
	// ErrInvalidSize: a negative size or count, a size that is not a multiple of the
	// element size, a size that overflows, or zero where a buffer is required.
	ErrInvalidSize = core.ErrInvalidSize
	// ErrNullPointer: a null device pointer (or kernel) where a non-empty buffer is needed,
	// or any pointer into the null page (below 4096), where no buffer lies.
	ErrNullPointer = core.ErrNullPointer
	// ErrMisaligned: a device pointer of an element-typed reduction that is not a
	// multiple of the element size (a bfloat16 buffer at an odd address). Every backend
	// rejects it, so a rank never reaches the library with it.
	ErrMisaligned = core.ErrMisaligned
	// ErrInvalidType: a DType that is not one of comm's element types.
	ErrInvalidType = core.ErrInvalidType
	// ErrInvalidOp: a ReduceOp that is not one of comm's operators.
	ErrInvalidOp = core.ErrInvalidOp
	// ErrClosed: the backend or communicator was closed.
	ErrClosed = core.ErrClosed
	// ErrGroupNotOpen: GroupEnd without a matching GroupStart.
	ErrGroupNotOpen = core.ErrGroupNotOpen
	// ErrGroupOpen: an operation that cannot be part of a group (it waits, allocates or
	// re-creates the communicator) was called between GroupStart and GroupEnd, or Close
	// found a group still open.
	ErrGroupOpen = core.ErrGroupOpen
	// ErrUnknownHandle: a handle that RegisterBuffer did not return, or already
	// deregistered.
	ErrUnknownHandle = core.ErrUnknownHandle
	// ErrUnknownPointer: a pointer that SymmetricAlloc did not return, or already freed.
	ErrUnknownPointer = core.ErrUnknownPointer
	// ErrUnsupported: the backend (or the loaded NCCL) does not offer the operation. It
	// is errors.ErrUnsupported, so either name matches.
	ErrUnsupported = core.ErrUnsupported
	// ErrUnhealthy: the communicator saw a transport error or a completion timeout;
	// only AttemptReconnect or Close are useful now.
	ErrUnhealthy = core.ErrUnhealthy
	// ErrTimeout: an operation did not complete within the operation timeout
	// (WithTimeout). The communicator is unhealthy afterwards.
	ErrTimeout = core.ErrTimeout
	// ErrOverlap: the send and receive buffers of an operation that needs them apart
	// (AllToAll, AllToAllv) overlap.
	ErrOverlap = core.ErrOverlap
	// ErrMismatch: the collective check found ranks calling different collectives, or
	// the same with other counts, element type, root or reduction (MismatchError).
	ErrMismatch = core.ErrMismatch
)
