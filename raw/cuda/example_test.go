//go:build cgo

package cuda_test

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// Results are errors: compare them with errors.Is; a function newer than the installed
// driver returns a *SymbolError instead of crashing.
func ExampleResult() {
	err := cuda.Init(0)
	var se *cuda.SymbolError
	switch {
	case err == nil:
		fmt.Println("driver ready")
	case errors.Is(err, cuda.ErrorNoDevice):
		fmt.Println("no GPU:", err) // cuda: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected
	case errors.Is(err, cuda.ErrLibraryNotFound):
		fmt.Println("no driver:", err)
	case errors.As(err, &se):
		fmt.Println(se.Symbol, "needs a newer driver")
	default:
		fmt.Println(err)
	}
}

// Ask which libcuda was loaded, why, and which CUDA version it supports.
func ExampleLibraryInfo() {
	info := cuda.LibraryInfo()
	if info.Err != nil {
		fmt.Println("no CUDA driver:", info.Err)
		return
	}
	fmt.Printf("%s from %s (found by %s)\n", info.Version, info.Path, info.Source)
}

// A missing library is an ordinary error from the first call, never a crash.
func ExampleSetLibraryPath() {
	if err := cuda.SetLibraryPath("/nonexistent/libcuda.so.1"); err != nil {
		fmt.Println(err)
		return
	}
	err := cuda.Init(0)
	fmt.Println(errors.Is(err, cuda.ErrLibraryNotFound))
	// Output: true
}

// Without a driver, a Result is still an error with a usable message.
func ExampleResult_Error() {
	var err error = cuda.ErrorInvalidValue
	fmt.Println(errors.Is(err, cuda.ErrorInvalidValue), errors.Is(err, cuda.ErrorNoDevice))
	// Output: true false
}
