package main

import "fmt"

// The naming rule applied to a few names of cuda.h.
func Example_namingRule() {
	prefixes := []string{"CUDA_", "CU_", "CU", "cu"}
	for _, c := range []string{"cuMemAlloc", "CUdevice_attribute", "CUDA_ERROR_NO_DEVICE", "CUDA_MEMCPY2D_v2"} {
		fmt.Println(c, "->", goName(c, prefixes))
	}
	// Output:
	// cuMemAlloc -> MemAlloc
	// CUdevice_attribute -> DeviceAttribute
	// CUDA_ERROR_NO_DEVICE -> ErrorNoDevice
	// CUDA_MEMCPY2D_v2 -> Memcpy2dV2
}
