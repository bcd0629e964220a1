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
	err := record()
	if err == nil {
		err = b.Run()
	}
	var be *nccl.BatchError
	switch {
	case errors.As(err, &be):
		fmt.Println("call", be.Index, be.Func, "failed:", be.Result, be.Detail())
	case errors.Is(err, nccl.ErrLibraryNotFound):
		// As here: this test binary's library is /nonexistent (ExampleSetLibraryPath).
		fmt.Println("no libnccl: nothing recorded, nothing run")
	case err != nil:
		fmt.Println(err)
	}
	// Output:
	// no libnccl: nothing recorded, nothing run
}
