package kernels_test

import (
	"fmt"

	"github.com/ncclgo/ncclgo/kernels"
)

// Two ranks' bf16 buffers summed as the 2-rank all-reduce path does: the
// peer's data is added in place, each element rounded once.
func ExampleAddBF16() {
	mine := []uint16{kernels.Float32ToBF16(1), kernels.Float32ToBF16(0.1), kernels.Float32ToBF16(3)}
	peer := []uint16{kernels.Float32ToBF16(1), kernels.Float32ToBF16(0.2), kernels.Float32ToBF16(-3)}
	if err := kernels.AddBF16(mine, peer); err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range mine {
		fmt.Printf("%#04x %g\n", v, kernels.BF16ToFloat32(v))
	}
	fmt.Println(kernels.AddBF16(mine, peer[:1]))
	// Output:
	// 0x4000 2
	// 0x3e9a 0.30078125
	// 0x0000 0
	// bf16 add: dst has 3 elements, src has 1: length mismatch
}

// Load the add kernels into the current CUDA context and hand the bf16 one
// to a backend. Load needs a context current on the calling OS thread (after
// cuInit, cuDevicePrimaryCtxRetain and cuCtxSetCurrent); without one, as
// here, it returns the driver's error, on any machine.
func ExampleLoad() {
	mod, err := kernels.Load()
	if err != nil {
		fmt.Println("no CUDA context here, Load failed:", err != nil)
		return
	}
	defer mod.Close()
	f, err := mod.Func(kernels.BF16)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = f // backend.SetAddKernel(comm.Kernel(f))
	// Output: no CUDA context here, Load failed: true
}

// The launch configuration for 1 MiB and 1 GiB of bf16 on a GPU with 132
// SMs: one thread per 16 bytes up to 6 blocks of 256 threads per SM.
func ExampleLaunchDims() {
	for _, n := range []int{1 << 19, 1 << 29} {
		grid, block, err := kernels.LaunchDims(n, 2, 132)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(n, grid, block)
	}
	_, _, err := kernels.LaunchDims(-1, 2, 132)
	fmt.Println(err)
	// Output:
	// 524288 256 256
	// 536870912 792 256
	// launch dims: negative element count -1: invalid add kernel launch
}
