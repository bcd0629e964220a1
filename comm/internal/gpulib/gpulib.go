// Package gpulib is the narrow boundary between comm's NCCL backend and the libraries it
// drives: the few CUDA driver and NCCL calls the backend makes, as one interface.
// Production code implements it on top of raw/cuda and raw/nccl; comm/commtest
// implements it with a host-memory simulator. Nothing outside comm can import it.
//
// Values mirror the C API: a Ptr is a CUdeviceptr, a Stream a CUstream (== cudaStream_t),
// DataType and RedOp use ncclDataType_t and ncclRedOp_t numbering, Result is ncclResult_t.
package gpulib

import (
	"github.com/ncclgo/ncclgo/raw/nccl"
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

// DataType, RedOp and Result are raw/nccl's generated ncclDataType_t, ncclRedOp_t and
// ncclResult_t: the header's numbers exist once, in the generated code.
type (
	DataType = nccl.DataType
	RedOp    = nccl.RedOp
	Result   = nccl.Result
)

// The values the backend and the simulator use.
const (
	Int8       = nccl.Int8
	Uint8      = nccl.Uint8
	Int32      = nccl.Int32
	Uint32     = nccl.Uint32
	Int64      = nccl.Int64
	Uint64     = nccl.Uint64
	Float16    = nccl.Float16
	Float32    = nccl.Float32
	Float64    = nccl.Float64
	Bfloat16   = nccl.Bfloat16
	Float8e4m3 = nccl.Float8e4m3
	Float8e5m2 = nccl.Float8e5m2

	Sum  = nccl.Sum
	Prod = nccl.Prod
	Max  = nccl.Max
	Min  = nccl.Min
	Avg  = nccl.Avg
	// NumOps is ncclNumOps: operators made by ncclRedOpCreatePreMulSum are numbered from
	// it.
	NumOps = nccl.NumOps

	Success            = nccl.Success
	UnhandledCudaError = nccl.UnhandledCudaError
	SystemError        = nccl.SystemError
	InternalError      = nccl.InternalError
	InvalidArgument    = nccl.InvalidArgument
	InvalidUsage       = nccl.InvalidUsage
	RemoteError        = nccl.RemoteError
	InProgress         = nccl.InProgress
	Timeout            = nccl.Timeout

	// SplitNoColor is NCCL_SPLIT_NOCOLOR: the rank joins no child communicator.
	SplitNoColor = nccl.SplitNocolor
	// WinCollSymmetric is NCCL_WIN_COLL_SYMMETRIC for CommWindowRegister.
	WinCollSymmetric = nccl.WinCollSymmetric
	// ShrinkDefault and ShrinkAbort are the NCCL_SHRINK_* flags of CommShrink.
	ShrinkDefault = nccl.ShrinkDefault
	ShrinkAbort   = nccl.ShrinkAbort
)

// ResultName returns the C name of r ("ncclRemoteError"), also when no library is
// loaded.
func ResultName(r Result) string { return r.Name() }

// Fatal reports whether a communicator that returned r must be aborted and re-created
// (NCCL's rule: only invalid-argument leaves it usable; in-progress is not an error).
func Fatal(r Result) bool {
	switch r {
	case Success, InvalidArgument, InProgress:
		return false
	}
	return true
}

// Error is an NCCL failure as a Driver reports it: the result, NCCL's own text about it
// (ncclGetLastError, or the simulator's account), and the library's error (raw's
// *nccl.Error in production), kept reachable through Unwrap. errors.Is(err,
// nccl.RemoteError) matches Code whatever Err is.
type Error struct {
	Code   Result
	Detail string
	Err    error
}

// Error returns the library's message, else the result's C name and the detail.
func (e *Error) Error() string {
	if e.Err != nil {
		return e.Err.Error()
	}
	if e.Detail != "" {
		return ResultName(e.Code) + ": " + e.Detail
	}
	return ResultName(e.Code)
}

// Unwrap returns the library's error.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the result code: errors.Is(err, nccl.RemoteError).
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// Config is what the backend sets in ncclConfig_t; every other field keeps the value of
// NCCL_CONFIG_INITIALIZER.
type Config struct {
	// Blocking false creates a non-blocking communicator (config.blocking = 0).
	Blocking bool
	// Name is the communicator's name in NCCL's logs (config.commName); may be empty.
	Name string
	// NetName is config.netName; empty keeps NCCL's default.
	NetName string
	// Ints are the other int fields to set, by their C names ("cgaClusterSize",
	// "minCTAs", ...); the caller has checked that the loaded NCCL has them.
	Ints []ConfigInt
}

// ConfigInt is one int field of ncclConfig_t, by its C name.
type ConfigInt struct {
	Name  string
	Value int32
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
	// StreamIsCapturing is cuStreamIsCapturing: whether s is capturing into a CUDA
	// graph (CU_STREAM_CAPTURE_STATUS_ACTIVE; an invalidated capture counts too), so
	// that work on it is recorded instead of run and the host must not wait for it.
	StreamIsCapturing(s Stream) (bool, error)
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
	// LastError is ncclGetLastError(c): NCCL's text about the last failure, "" if none.
	LastError(c Comm) string
	CommFinalize(c Comm) error
	CommDestroy(c Comm) error
	CommAbort(c Comm) error
	CommSplit(c Comm, color, key int, cfg Config) (Comm, error)
	// CommShrink is ncclCommShrink (NCCL >= 2.27); flags is NCCL_SHRINK_DEFAULT (0) or
	// NCCL_SHRINK_ABORT (1).
	CommShrink(c Comm, exclude []int, cfg Config, flags int) (Comm, error)
	// CommRevoke is ncclCommRevoke (NCCL >= 2.28).
	CommRevoke(c Comm, flags int) error

	// Ops are the communication calls, made at once.
	Ops
	// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum for elements of dt. With device
	// false, scalar holds the scalar's bytes (one element of dt, little-endian) and NCCL
	// copies it at once (ncclScalarHostImmediate); with device true it is the device
	// address of the scalar, which every operation using the op reads
	// (ncclScalarDevice).
	RedOpCreatePreMulSum(c Comm, dt DataType, scalar uint64, device bool) (RedOp, error)
	// RedOpDestroy is ncclRedOpDestroy.
	RedOpDestroy(c Comm, op RedOp) error
	// GroupStart and GroupEnd are ncclGroupStart/End. NCCL keeps group state per OS
	// thread, for every communicator of the process: between the two, every
	// communication call made on the same thread, on any communicator, is deferred to
	// the outermost GroupEnd. The caller keeps its goroutine locked to the thread.
	GroupStart() error
	GroupEnd() error
	// Submit makes a whole group: ncclGroupStart, every call in order, ncclGroupEnd,
	// with the semantics of making them one by one on the calling thread (each on the
	// device of its communicator), in one crossing into the library where the
	// driver can. It reports the first failure as (index, error): the index of the first
	// call whose result was neither ncclSuccess nor ncclInProgress (NCCL then drops the
	// group and ncclGroupEnd fails too), len(calls) for ncclGroupEnd's own result
	// (ncclInProgress while a non-blocking communicator launches), or SubmitGroupStart
	// when ncclGroupStart failed and nothing was called. NCCL failures are *Error with
	// NCCL's text. With every call successful it returns (len(calls), nil). The caller
	// keeps its goroutine locked to the thread.
	Submit(calls []Call) (int, error)

	CommRegister(c Comm, buf Ptr, bytes uint64) (Handle, error)
	CommDeregister(c Comm, h Handle) error
	// MemAllocNCCL and MemFreeNCCL are ncclMemAlloc / ncclMemFree (NCCL >= 2.19).
	MemAllocNCCL(bytes uint64) (Ptr, error)
	MemFreeNCCL(p Ptr) error
	// CommWindowRegister is ncclCommWindowRegister (NCCL >= 2.27); a collective call.
	CommWindowRegister(c Comm, buf Ptr, bytes uint64, flags int) (Handle, error)
	CommWindowDeregister(c Comm, w Handle) error
}
