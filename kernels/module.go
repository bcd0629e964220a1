package kernels

import (
	"errors"
	"fmt"
	"sync"
)

// ErrClosed is returned by a Module's methods after Close.
var ErrClosed = errors.New("add kernel module closed")

// driver is the part of the CUDA driver API a Module needs. The production
// implementation calls raw/cuda; tests use a fake.
type driver interface {
	// moduleLoadData is cuModuleLoadData; image is NUL-terminated PTX.
	moduleLoadData(image []byte) (uintptr, error)
	// moduleGetFunction is cuModuleGetFunction.
	moduleGetFunction(mod uintptr, name string) (uintptr, error)
	// moduleUnload is cuModuleUnload.
	moduleUnload(mod uintptr) error
}

// Module is the add kernels' PTX loaded into a CUDA context, with the
// function handle of every kernel resolved. It belongs to the context that
// was current when it was loaded and is usable from any goroutine. Close
// unloads it.
type Module struct {
	drv   driver
	mu    sync.Mutex
	mod   uintptr // 0 once closed
	funcs [len(kernelNames)]uintptr
}

// kernelNames is indexed by Kind-1.
var kernelNames = [...]string{AddBF16Name, AddF16Name, AddF32Name}

func load(drv driver) (*Module, error) {
	image := make([]byte, len(addPTX)+1) // cuModuleLoadData wants a NUL-terminated PTX image
	copy(image, addPTX)
	mod, err := drv.moduleLoadData(image)
	if err != nil {
		return nil, fmt.Errorf("load add kernels (%d bytes of PTX): %w", len(addPTX), err)
	}
	if mod == 0 {
		return nil, errors.New("load add kernels: driver returned a null module")
	}
	m := &Module{drv: drv, mod: mod}
	for i, name := range kernelNames {
		f, err := drv.moduleGetFunction(mod, name)
		if err == nil && f == 0 {
			err = errors.New("driver returned a null function")
		}
		if err != nil {
			uerr := drv.moduleUnload(mod)
			return nil, errors.Join(fmt.Errorf("load add kernels: function %s: %w", name, err), uerr)
		}
		m.funcs[i] = f
	}
	return m, nil
}

// Func returns the CUfunction handle of k's add kernel, the value comm's
// Backend.SetAddKernel takes (as a comm.Kernel). It returns an error
// wrapping ErrKind for an unknown kind and ErrClosed after Close.
func (m *Module) Func(k Kind) (uintptr, error) {
	if m == nil {
		return 0, fmt.Errorf("add kernel %v: nil module", k)
	}
	if _, err := k.Name(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mod == 0 {
		return 0, fmt.Errorf("add kernel %v: %w", k, ErrClosed)
	}
	return m.funcs[k-1], nil
}

// Close unloads the module (cuModuleUnload); its function handles become
// invalid. The module's context must still exist and be current. Closing
// twice returns nil the second time.
func (m *Module) Close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mod == 0 {
		return nil
	}
	mod := m.mod
	m.mod = 0
	m.funcs = [len(kernelNames)]uintptr{}
	if err := m.drv.moduleUnload(mod); err != nil {
		return fmt.Errorf("unload add kernels: %w", err)
	}
	return nil
}
