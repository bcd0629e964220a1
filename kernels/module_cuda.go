package kernels

import (
	"unsafe"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// Load loads the embedded add kernels into the CUDA context current on
// the calling OS thread (cuModuleLoadData; the driver JIT-compiles the PTX
// for the device, compute capability 8.0 or newer) and resolves every
// kernel. The caller keeps the context alive and current while it uses
// the Module, and calls Close before destroying the context. Driver
// failures are returned wrapped, reachable with errors.As as a cuda.Result
// (or as the loader errors of raw/cuda when libcuda cannot be loaded).
func Load() (*Module, error) {
	return load(cudaDriver{})
}

// cudaDriver is the driver interface over raw/cuda.
type cudaDriver struct{}

func (cudaDriver) moduleLoadData(image []byte) (uintptr, error) {
	var m cuda.Module
	if err := cuda.ModuleLoadData(&m, unsafe.Pointer(unsafe.SliceData(image))); err != nil {
		return 0, err
	}
	return uintptr(m), nil
}

func (cudaDriver) moduleGetFunction(mod uintptr, name string) (uintptr, error) {
	cname := append([]byte(name), 0)
	var f cuda.Function
	if err := cuda.ModuleGetFunction(&f, cuda.Module(mod), &cname[0]); err != nil {
		return 0, err
	}
	return uintptr(f), nil
}

func (cudaDriver) moduleUnload(mod uintptr) error {
	return cuda.ModuleUnload(cuda.Module(mod))
}
