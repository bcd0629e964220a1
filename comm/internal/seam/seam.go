// Package seam is the narrow boundary between comm's NCCL backend and the libraries it
// drives: the few CUDA driver and NCCL calls the backend makes, as one interface.
// Production code implements it on top of raw/cuda and raw/nccl; comm/commtest
// implements it with a host-memory simulator. Nothing outside comm can import it.
//
// Values mirror the C API: a Ptr is a CUdeviceptr, a Stream a CUstream (== cudaStream_t),
// DataType and RedOp use ncclDataType_t and ncclRedOp_t numbering, Result is ncclResult_t.
package seam

import (
	"context"
	"fmt"
)

// Ptr is a device address (CUdeviceptr).
type Ptr uint64

// Stream is a CUDA stream handle (CUstream, the same as cudaStream_t). 0 is the legacy
// default stream.
type Stream uintptr

// Event is a CUDA event handle (CUevent).
type Event uintptr

// Function is a CUDA kernel handle (CUfunction).
type Function uintptr

// Comm is an NCCL communicator handle (ncclComm_t).
type Comm uintptr

// Handle is an opaque NCCL handle: a registration (ncclCommRegister) or a window
// (ncclWindow_t).
type Handle uintptr

// UniqueID is ncclUniqueId: 128 opaque bytes created by one rank and shared with the others.
type UniqueID [128]byte

// DataType is an ncclDataType_t value.
type DataType int32

// ncclDataType_t values.
const (
	Int8       DataType = 0
	Uint8      DataType = 1
	Int32      DataType = 2
	Uint32     DataType = 3
	Int64      DataType = 4
	Uint64     DataType = 5
	Float16    DataType = 6
	Float32    DataType = 7
	Float64    DataType = 8
	Bfloat16   DataType = 9
	Float8e4m3 DataType = 10
	Float8e5m2 DataType = 11
)

// RedOp is an ncclRedOp_t value.
type RedOp int32

// ncclRedOp_t values.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// Result is an ncclResult_t value.
type Result int32

// ncclResult_t values.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	Timeout            Result = 8
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
	"ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError",
	"ncclInProgress", "ncclTimeout"}

// String returns the C name of the result.
func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Fatal reports whether a communicator that returned r must be aborted and re-created
// (NCCL's rule: only invalid-argument leaves it usable; in-progress is not an error).
func (r Result) Fatal() bool {
	switch r {
	case Success, InvalidArgument, InProgress:
		return false
	}
	return true
}

// Error is an NCCL failure as a Driver reports it. Err is the library's own error (raw's
// nccl.Result in production), kept reachable through Unwrap.
type Error struct {
	Code Result
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	return e.Code.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Config is what the backend sets in ncclConfig_t; every other field keeps the value of
// NCCL_CONFIG_INITIALIZER.
type Config struct {
	// Blocking false creates a non-blocking communicator (config.blocking = 0).
	Blocking bool
	// Name is the communicator's name in NCCL's logs (config.commName); may be empty.
	Name string
}

// KernelArgs are the parameters of a kernel launch, each passed as an 8-byte value
// (device pointers and sizes). N says how many of V are used.
type KernelArgs struct {
	N int
	V [4]uint64
}

// Driver is every CUDA and NCCL call comm's NCCL backend makes. A Driver is bound to one
// device (one rank); methods that act on "the current device" act on that one. NCCL
// failures are returned as *Error; CUDA failures as the driver's own error.
type Driver interface {
	// SetDevice makes the driver's device (its primary context) current on the calling
	// OS thread. The caller has locked its goroutine to the thread.
	SetDevice() error

	MemAlloc(bytes uint64) (Ptr, error)
	MemFree(p Ptr) error
	// MemcpyDtoDAsync copies bytes on stream s.
	MemcpyDtoDAsync(dst, src Ptr, bytes uint64, s Stream) error

	// StreamCreate creates a non-blocking stream (CU_STREAM_NON_BLOCKING).
	StreamCreate() (Stream, error)
	StreamDestroy(s Stream) error
	StreamSynchronize(s Stream) error
	// StreamQuery reports whether all work queued on s has completed.
	StreamQuery(s Stream) (bool, error)
	// EventCreate creates an event without timing (CU_EVENT_DISABLE_TIMING).
	EventCreate() (Event, error)
	EventDestroy(e Event) error
	EventRecord(e Event, s Stream) error
	// EventQuery reports whether the work captured by e has completed.
	EventQuery(e Event) (bool, error)
	StreamWaitEvent(s Stream, e Event) error
	LaunchKernel(f Function, grid, block uint32, s Stream, args KernelArgs) error
	// MultiprocessorCount is cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
	// of the driver's device: the number of SMs, for kernel launch configurations.
	MultiprocessorCount() (int, error)

	// Version is ncclGetVersion (e.g. 22907).
	Version() (int, error)
	GetUniqueID() (UniqueID, error)
	// CommInitRank is ncclCommInitRankConfig. With cfg.Blocking false it may return a
	// communicator that is still initialising (CommGetAsyncError says InProgress).
	CommInitRank(nranks int, id UniqueID, rank int, cfg Config) (Comm, error)
	// CommGetAsyncError returns the communicator's asynchronous state (Success,
	// InProgress or the error NCCL recorded); err is set only if the query itself failed.
	CommGetAsyncError(c Comm) (Result, error)
	CommFinalize(c Comm) error
	CommDestroy(c Comm) error
	CommAbort(c Comm) error
	CommSplit(c Comm, color, key int, cfg Config) (Comm, error)
	// CommShrink is ncclCommShrink (NCCL >= 2.27); flags is NCCL_SHRINK_DEFAULT (0) or
	// NCCL_SHRINK_ABORT (1).
	CommShrink(c Comm, exclude []int, cfg Config, flags int) (Comm, error)
	// CommRevoke is ncclCommRevoke (NCCL >= 2.28).
	CommRevoke(c Comm, flags int) error

	AllReduce(send, recv Ptr, count uint64, dt DataType, op RedOp, c Comm, s Stream) error
	Broadcast(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error
	AllGather(send, recv Ptr, sendCount uint64, dt DataType, c Comm, s Stream) error
	ReduceScatter(send, recv Ptr, recvCount uint64, dt DataType, op RedOp, c Comm, s Stream) error
	Send(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error
	Recv(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error
	// GroupStart and GroupEnd are ncclGroupStart/End. Group state belongs to the
	// driver (NCCL keeps it per thread; the backend drives each rank from one place).
	GroupStart() error
	GroupEnd() error

	CommRegister(c Comm, buf Ptr, bytes uint64) (Handle, error)
	CommDeregister(c Comm, h Handle) error
	// MemAllocNCCL and MemFreeNCCL are ncclMemAlloc / ncclMemFree (NCCL >= 2.19).
	MemAllocNCCL(bytes uint64) (Ptr, error)
	MemFreeNCCL(p Ptr) error
	// CommWindowRegister is ncclCommWindowRegister (NCCL >= 2.27); a collective call.
	CommWindowRegister(c Comm, buf Ptr, bytes uint64, flags int) (Handle, error)
	CommWindowDeregister(c Comm, w Handle) error
}

// NewNCCLFunc builds comm's NCCL backend on a Driver. comm registers it in NewNCCL at
// init; comm/commtest calls it with its simulator. opts is a []comm.Option and the
// result a *comm.NCCL (typed as any to keep this package free of comm's types).
type NewNCCLFunc func(ctx context.Context, d Driver, id UniqueID, rank, world int, opts any) (any, error)

// NewNCCL is set by package comm's init.
var NewNCCL NewNCCLFunc
