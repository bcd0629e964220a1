package cuda

import (
	"strconv"
	"unsafe"
)

// Error makes a Result an error. Its message is the driver's own, from cuGetErrorName and
// cuGetErrorString ("cuda: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"),
// when the driver is loaded, else the number: "cuda: CUresult 100".
func (r Result) Error() string {
	if lib.Loaded() {
		var name, desc *byte
		if GetErrorName(r, &name) == nil && name != nil {
			msg := "cuda: " + goString(name)
			if GetErrorString(r, &desc) == nil && desc != nil {
				msg += ": " + goString(desc)
			}
			return msg
		}
	}
	return "cuda: CUresult " + strconv.Itoa(int(r))
}

// resultError turns what a driver function returned into an error: nil for Success,
// else the Result itself, so errors.Is(err, cuda.ErrorNoDevice) and errors.As(err,
// &result) work. The success path allocates nothing.
func resultError(r Result) error {
	if r == Success {
		return nil
	}
	return r
}

// goString copies the NUL-terminated C string at p (a string the driver owns).
func goString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
