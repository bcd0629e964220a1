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

// Load a particular libnccl, then ask which file was loaded and why.
func ExampleLibraryInfo() {
	if err := nccl.SetLibraryPath("/opt/nccl/lib/libnccl.so.2"); err != nil {
		fmt.Println(err)
		return
	}
	info := nccl.LibraryInfo()
	if info.Err != nil {
		fmt.Println("no NCCL:", info.Err) // lists every file tried, with the loader's message
		return
	}
	fmt.Printf("%s from %s (found by %s)\n", info.Version, info.Path, info.Source)
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
	// Output:
	// true
	// SetLibraryPath /nonexistent/libnccl.so.2
}

// NCCL's results are errors: compare them with errors.Is, read NCCL's last-error text
// from *nccl.Error, and tell a library older than the function by ErrSymbolNotFound.
func ExampleError() {
	var id nccl.UniqueId
	var comm nccl.Comm
	err := nccl.GetUniqueId(&id)
	if err == nil {
		err = nccl.CommInitRank(&comm, 1, id, 0)
	}
	var ne *nccl.Error
	var se *nccl.SymbolError
	switch {
	case err == nil:
		fmt.Println("communicator ready")
	case errors.Is(err, nccl.UnhandledCudaError) && errors.As(err, &ne):
		fmt.Println("CUDA failed inside NCCL:", ne.Detail)
	case errors.As(err, &se):
		fmt.Println("this libnccl is too old:", se.Since, "needed")
	default:
		fmt.Println(err)
	}
}
