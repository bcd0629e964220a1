package sim

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// CUDAResult is a CUresult value.
type CUDAResult int

// CUresult values the simulator returns.
const (
	ErrorInvalidValue      CUDAResult = 1
	ErrorOutOfMemory       CUDAResult = 2
	ErrorDeinitialized     CUDAResult = 4
	ErrorDeviceUnavailable CUDAResult = 46
	ErrorInvalidHandle     CUDAResult = 400
	ErrorNotFound          CUDAResult = 500
	ErrorIllegalAddress    CUDAResult = 700
	ErrorMisalignedAddress CUDAResult = 716
	ErrorLaunchFailed      CUDAResult = 719

	ErrorIllegalState             CUDAResult = 401
	ErrorStreamCaptureUnsupported CUDAResult = 900
	ErrorStreamCaptureInvalidated CUDAResult = 901
	ErrorStreamCaptureUnmatched   CUDAResult = 903
	ErrorStreamCaptureUnjoined    CUDAResult = 904
	ErrorStreamCaptureIsolation   CUDAResult = 905
)

var cudaNames = map[CUDAResult]string{
	ErrorInvalidValue:      "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:       "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorDeinitialized:     "CUDA_ERROR_DEINITIALIZED",
	ErrorDeviceUnavailable: "CUDA_ERROR_DEVICE_UNAVAILABLE",
	ErrorInvalidHandle:     "CUDA_ERROR_INVALID_HANDLE",
	ErrorNotFound:          "CUDA_ERROR_NOT_FOUND",
	ErrorIllegalAddress:    "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorMisalignedAddress: "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrorLaunchFailed:      "CUDA_ERROR_LAUNCH_FAILED",

	ErrorIllegalState:             "CUDA_ERROR_ILLEGAL_STATE",
	ErrorStreamCaptureUnsupported: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrorStreamCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrorStreamCaptureUnmatched:   "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
	ErrorStreamCaptureUnjoined:    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	ErrorStreamCaptureIsolation:   "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
}

// String returns the C name of the result.
func (r CUDAResult) String() string {
	if s, ok := cudaNames[r]; ok {
		return s
	}
	return fmt.Sprintf("CUresult(%d)", int(r))
}

// CUDAError is a failed CUDA driver call of the simulator. errors.Is matches another
// *CUDAError with the same Code.
type CUDAError struct {
	Code   CUDAResult
	Call   string // the C function, e.g. "cuMemAlloc_v2"
	Detail string // what was wrong, with the values
}

func (e *CUDAError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s: %v", e.Call, e.Code)
	}
	return fmt.Sprintf("%s: %v: %s", e.Call, e.Code, e.Detail)
}

// Is reports whether target is a *CUDAError with the same code.
func (e *CUDAError) Is(target error) bool {
	var t *CUDAError
	return errors.As(target, &t) && t.Code == e.Code
}

func cudaErr(code CUDAResult, call, format string, args ...any) error {
	return &CUDAError{Code: code, Call: call, Detail: fmt.Sprintf(format, args...)}
}

// NCCLError is the library-side error of a failed NCCL call of the simulator; the
// Driver returns it inside a *gpulib.Error with the same code.
type NCCLError struct {
	Code   gpulib.Result
	Call   string // the C function, e.g. "ncclAllReduce"
	Detail string
}

func (e *NCCLError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s: %s", e.Call, gpulib.ResultName(e.Code))
	}
	return fmt.Sprintf("%s: %s: %s", e.Call, gpulib.ResultName(e.Code), e.Detail)
}

func ncclErr(code gpulib.Result, call, format string, args ...any) error {
	return &gpulib.Error{Code: code, Err: &NCCLError{Code: code, Call: call, Detail: fmt.Sprintf(format, args...)}}
}

// inProgress is the ncclInProgress a non-blocking call returns when it has not
// completed yet: the caller polls ncclCommGetAsyncError.
func inProgress(call, format string, args ...any) error {
	return &gpulib.Error{Code: gpulib.InProgress, Err: &NCCLError{Code: gpulib.InProgress, Call: call, Detail: fmt.Sprintf(format, args...)}}
}

// ErrInjected is wrapped by the errors that FailCall makes a driver call return when the
// test did not give its own.
var ErrInjected = errors.New("injected failure")

// MissingSymbolError is what a call returns when the simulated NCCL version is older
// than the function (the production driver cannot find the symbol either).
type MissingSymbolError struct {
	Symbol  string
	Version int // the simulated ncclGetVersion
	Since   int // first version with the symbol
}

func (e *MissingSymbolError) Error() string {
	return fmt.Sprintf("%s: not in NCCL %d (needs %d or newer)", e.Symbol, e.Version, e.Since)
}
