//go:build cgo

package cuda_test

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// Results are errors: compare them with errors.Is; a function newer than the installed
// driver returns a *SymbolError instead of crashing. explain is what a program does with
// the error of cuda.Init(0), shown here on results any machine can produce.
func ExampleResult() {
	explain := func(err error) string {
		var se *cuda.SymbolError
		switch {
		case err == nil:
			return "driver ready"
		case errors.Is(err, cuda.ErrorNoDevice):
			return "no GPU" // err.Error() names the result, with the driver's text once it is loaded
		case errors.Is(err, cuda.ErrLibraryNotFound):
			return "no driver: " + err.Error()
		case errors.As(err, &se):
			return se.Symbol + " needs a newer driver"
		}
		return err.Error()
	}
	fmt.Println(explain(nil))
	fmt.Println(explain(cuda.ErrorNoDevice))
	fmt.Println(explain(fmt.Errorf("cuInit: %w", cuda.ErrorNoDevice)))
	// Output:
	// driver ready
	// no GPU
	// no GPU
}

// A missing library is an ordinary error from the first call, never a crash.
func ExampleSetLibraryPath() {
	if err := cuda.SetLibraryPath("/nonexistent/libcuda.so.1"); err != nil {
		fmt.Println(err)
		return
	}
	err := cuda.Init(0)
	fmt.Println(errors.Is(err, cuda.ErrLibraryNotFound))
	// LibraryInfo says which file was loaded and why, or, as here, why none was.
	info := cuda.LibraryInfo()
	fmt.Println(info.Path == "", errors.Is(info.Err, cuda.ErrLibraryNotFound))
	// Output:
	// true
	// true true
}

// Without a driver, a Result is still an error with a usable message.
func ExampleResult_Error() {
	var err error = cuda.ErrorInvalidValue
	fmt.Println(errors.Is(err, cuda.ErrorInvalidValue), errors.Is(err, cuda.ErrorNoDevice))
	// Output: true false
}
