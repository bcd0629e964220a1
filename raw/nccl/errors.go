package nccl

import "strconv"

// Error is the error of an NCCL call that did not return Success: the Result and the
// text of ncclGetLastError taken right after the failure. It unwraps to its Result, so
// errors.Is(err, nccl.UnhandledCudaError) and errors.As(err, &result) both work.
type Error struct {
	// Result is what the call returned.
	Result Result
	// Detail is ncclGetLastError(NULL) at the time of the failure: NCCL's own account of
	// what went wrong, e.g. "Cuda failure 'CUDA driver version is insufficient for CUDA
	// runtime version'". Empty when NCCL had nothing to say or the result is InProgress.
	Detail string
}

// Error is the Result's message followed by the detail.
func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Result.Error()
	}
	return e.Result.Error() + ": " + e.Detail
}

// Unwrap returns the Result.
func (e *Error) Unwrap() error { return e.Result }

// Error makes a Result an error. Its message is NCCL's own (ncclGetErrorString) when the
// library is loaded, else the number: "nccl: result 1".
func (r Result) Error() string {
	if lib.Loaded() {
		if s, err := GetErrorString(r); err == nil && s != "" {
			return "nccl: " + s
		}
	}
	return "nccl: result " + strconv.Itoa(int(r))
}

// resultError turns what an NCCL function returned into an error: nil for Success,
// else an *Error carrying ncclGetLastError's text. The success path allocates nothing.
func resultError(r Result) error {
	if r == Success {
		return nil
	}
	return newError(r)
}

// newError captures NCCL's last-error text for r.
func newError(r Result) error {
	e := &Error{Result: r}
	if r != InProgress && lib.Loaded() {
		if s, err := GetLastError(0); err == nil {
			e.Detail = s
		}
	}
	return e
}
