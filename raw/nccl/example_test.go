//go:build cgo

package nccl_test

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/raw/nccl"
)

// A config starts from NewConfig (NCCL_CONFIG_INITIALIZER); set only what you need.
func ExampleNewConfig() {
	c := nccl.NewConfig()
	c.Blocking = 0 // non-blocking communicator
	fmt.Println(c.Size == uint64(unsafe.Sizeof(c)), c.Magic == nccl.ApiMagic, c.Version == nccl.VersionCode)
	fmt.Println(c.Blocking, c.CgaClusterSize == nccl.ConfigUndefInt, c.NetName == nil)
	// Output:
	// true true true
	// 0 true true
}

// A missing library is an ordinary error from the first call, never a crash.
func ExampleSetLibraryPath() {
	if err := nccl.SetLibraryPath("/nonexistent/libnccl.so.2"); err != nil {
		fmt.Println(err)
		return
	}
	var version int32
	err := nccl.GetVersion(&version)
	fmt.Println(errors.Is(err, nccl.ErrLibraryNotFound))
	var le *nccl.LoadError
	if errors.As(err, &le) {
		fmt.Println(le.Attempts[0].Source, le.Attempts[0].Path)
	}
	// LibraryInfo says which file was loaded and why, or, as here, why none was.
	info := nccl.LibraryInfo()
	fmt.Println(info.Path == "", errors.Is(info.Err, nccl.ErrLibraryNotFound))
	// Output:
	// true
	// SetLibraryPath /nonexistent/libnccl.so.2
	// true true
}

// NCCL's results are errors: compare them with errors.Is, read NCCL's last-error text
// from *nccl.Error, and tell a library older than the function by ErrSymbolNotFound.
// explain is what a program does with the error of, say, ncclCommInitRank, shown here on
// errors any machine can produce.
func ExampleError() {
	explain := func(err error) string {
		var ne *nccl.Error
		var se *nccl.SymbolError
		switch {
		case err == nil:
			return "communicator ready"
		case errors.Is(err, nccl.UnhandledCudaError) && errors.As(err, &ne):
			return "CUDA failed inside NCCL: " + ne.Detail
		case errors.As(err, &se):
			return "this libnccl is too old: " + se.Error()
		}
		return err.Error()
	}
	fmt.Println(explain(nil))
	fmt.Println(explain(&nccl.Error{Result: nccl.UnhandledCudaError, Detail: "Cuda failure 'out of memory'"}))
	fmt.Println(errors.Is(nccl.InvalidArgument, nccl.InvalidArgument), errors.Is(nccl.InvalidArgument, nccl.InvalidUsage))
	// Output:
	// communicator ready
	// CUDA failed inside NCCL: Cuda failure 'out of memory'
	// true false
}
