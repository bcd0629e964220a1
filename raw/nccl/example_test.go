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
	fmt.Println(c.Size, c.Magic == nccl.ApiMagic, c.Version == nccl.VersionCode)
	fmt.Println(c.Blocking, c.CgaClusterSize == nccl.ConfigUndefInt, c.NetName == nil)
	// Output:
	// 88 true true
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

// A group of sends and receives to every peer (a mixture-of-experts all-to-all) made in
// one cgo crossing: record ncclGroupStart, the calls and ncclGroupEnd into a Batch, then
// Run it. The error names the first failing call with NCCL's own text; Result gives every
// call's result. Reset keeps the memory, so the next step's group allocates nothing.
func ExampleBatch() {
	var (
		comm        nccl.Comm                                    // from ncclCommInitRank
		stream      nccl.CudaStream                              // the stream the group runs on
		sendbuf                     = make([]unsafe.Pointer, 64) // device buffers, one per peer
		recvbuf                     = make([]unsafe.Pointer, 64)
		count       uint64          = 1 << 20
		peers, rank int32           = 64, 0
	)
	var b nccl.Batch
	record := func() error {
		if err := b.GroupStart(); err != nil {
			return err // libnccl could not be loaded, or lacks the function
		}
		for p := range peers {
			if p == rank {
				continue
			}
			_ = b.Send(sendbuf[p], count, nccl.Bfloat16, p, comm, stream)
			_ = b.Recv(recvbuf[p], count, nccl.Bfloat16, p, comm, stream)
		}
		return b.GroupEnd()
	}
	b.Reset()
	if err := record(); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Run(); err != nil {
		var be *nccl.BatchError
		if errors.As(err, &be) {
			fmt.Println("call", be.Index, be.Func, "failed:", be.Result, be.Detail())
		}
		return
	}
}
