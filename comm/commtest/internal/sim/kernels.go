package sim

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/kernels"
)

// Kernel is a device function the simulator can launch: Args is its parameter count and
// Run executes it on a device's memory.
type Kernel struct {
	Args int
	Run  func(m Memory, args []uint64) error
}

// Memory is what a kernel may do to its device's memory.
type Memory interface {
	Read(p gpulib.Ptr, n uint64) ([]byte, error)
	Write(p gpulib.Ptr, data []byte) error
}

// builtinKernels are the add kernels of package kernels, by their PTX entry names
// (kernels.AddBF16Name, ...): in-place adds with parameters (dst, src, count), count in
// elements, computed with the package's Go reference.
func builtinKernels() map[string]Kernel {
	return map[string]Kernel{
		kernels.AddBF16Name: addKernel(gpulib.Bfloat16),
		kernels.AddF16Name:  addKernel(gpulib.Float16),
		kernels.AddF32Name:  addKernel(gpulib.Float32),
	}
}

// addKernel adds count elements at src to dst, in place. Pointers must be aligned to
// the element size, as on a GPU.
func addKernel(dt gpulib.DataType) Kernel {
	es := uint64(elemSize(dt))
	return Kernel{Args: 3, Run: func(m Memory, a []uint64) error {
		dst, src, count := gpulib.Ptr(a[0]), gpulib.Ptr(a[1]), a[2]
		if count == 0 {
			return nil
		}
		if uint64(dst)%es != 0 || uint64(src)%es != 0 {
			return &CUDAError{Code: ErrorMisalignedAddress, Call: "cuLaunchKernel",
				Detail: fmt.Sprintf("%s add: dst %#x or src %#x not aligned to %d bytes", dtypeName(dt), uint64(dst), uint64(src), es)}
		}
		if count > (1<<62)/es {
			return &CUDAError{Code: ErrorIllegalAddress, Call: "cuLaunchKernel", Detail: fmt.Sprintf("count %d too large", count)}
		}
		s, err := m.Read(src, count*es)
		if err != nil {
			return &CUDAError{Code: ErrorIllegalAddress, Call: "cuLaunchKernel", Detail: "add kernel src: " + err.Error()}
		}
		d, err := m.Read(dst, count*es)
		if err != nil {
			return &CUDAError{Code: ErrorIllegalAddress, Call: "cuLaunchKernel", Detail: "add kernel dst: " + err.Error()}
		}
		if err := addReference(dt, d, s); err != nil {
			return &CUDAError{Code: ErrorLaunchFailed, Call: "cuLaunchKernel", Detail: err.Error()}
		}
		return m.Write(dst, d)
	}}
}

// addReference adds src to dst (little-endian elements of dt) with package kernels'
// reference of the add kernels.
func addReference(dt gpulib.DataType, dst, src []byte) error {
	if dt == gpulib.Float32 {
		a, b := make([]float32, len(dst)/4), make([]float32, len(src)/4)
		for i := range a {
			a[i] = math.Float32frombits(binary.LittleEndian.Uint32(dst[4*i:]))
			b[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		if err := kernels.AddF32(a, b); err != nil {
			return err
		}
		for i, v := range a {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	}
	a, b := make([]uint16, len(dst)/2), make([]uint16, len(src)/2)
	for i := range a {
		a[i] = binary.LittleEndian.Uint16(dst[2*i:])
		b[i] = binary.LittleEndian.Uint16(src[2*i:])
	}
	add := kernels.AddBF16
	if dt == gpulib.Float16 {
		add = kernels.AddF16
	}
	if err := add(a, b); err != nil {
		return err
	}
	for i, v := range a {
		binary.LittleEndian.PutUint16(dst[2*i:], v)
	}
	return nil
}

// function is a kernel loaded on one device (a CUfunction). Guarded by World.mu.
type function struct {
	h    gpulib.Function
	dev  *device
	name string
	k    Kernel
}

// RegisterKernel adds a kernel that LoadKernel can find by name, replacing one of the
// same name. Kernels already loaded keep their code.
func (w *World) RegisterKernel(name string, k Kernel) error {
	if name == "" || k.Run == nil || k.Args < 0 || k.Args > len(gpulib.KernelArgs{}.V) {
		return fmt.Errorf("register kernel %q: need a name, a Run function and 0 to %d args (got %d)", name, len(gpulib.KernelArgs{}.V), k.Args)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kernels[name] = k
	return nil
}

// LoadKernel returns the handle of the named kernel on device dev, as cuModuleGetFunction
// would: each device gets its own handle.
func (w *World) LoadKernel(dev int, name string) (gpulib.Function, error) {
	if dev < 0 || dev >= len(w.devices) {
		return 0, fmt.Errorf("load kernel %q: device %d out of range [0, %d)", name, dev, len(w.devices))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k, ok := w.kernels[name]
	if !ok {
		return 0, &CUDAError{Code: ErrorNotFound, Call: "cuModuleGetFunction", Detail: fmt.Sprintf("no kernel named %q", name)}
	}
	f := &function{h: gpulib.Function(w.handle()), dev: w.devices[dev], name: name, k: k}
	w.funcs[f.h] = f
	return f.h, nil
}

// devMemory gives kernels access to one device.
type devMemory struct{ d *device }

func (m devMemory) Read(p gpulib.Ptr, n uint64) ([]byte, error) { return m.d.read(p, n) }
func (m devMemory) Write(p gpulib.Ptr, data []byte) error       { return m.d.write(p, data) }
