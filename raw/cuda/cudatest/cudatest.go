// Package cudatest holds the host-device copies that ncclgo's GPU tests (raw, kernels,
// comm, commtest) share, so that a test cannot read data that has not landed yet.
//
// cuMemcpyHtoD from pageable host memory may return once the data is staged, before it
// reaches the device; cuMemsetD8 is asynchronous; both run on the legacy stream, which a
// CU_STREAM_NON_BLOCKING stream (NCCL's, the kernels' tests') does not wait for. Upload
// and Fill therefore wait for the whole context (cuCtxSynchronize) before they return,
// and Download waits for it before it copies, so that work queued on any stream of the
// context has finished. Each function needs the context current on the calling OS
// thread, like the driver calls it makes.
package cudatest

import (
	"fmt"
	"unsafe"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// Upload copies src to device memory at dst and returns once the data is there.
func Upload[T any](dst cuda.Deviceptr, src []T) error {
	n := uint64(len(src)) * uint64(unsafe.Sizeof(*new(T)))
	if n == 0 {
		return nil
	}
	if err := cuda.MemcpyHtoD(dst, unsafe.Pointer(unsafe.SliceData(src)), n); err != nil {
		return fmt.Errorf("cuMemcpyHtoD of %d bytes to %#x: %w", n, uint64(dst), err)
	}
	if err := cuda.CtxSynchronize(); err != nil {
		return fmt.Errorf("cuCtxSynchronize after cuMemcpyHtoD of %d bytes: %w", n, err)
	}
	return nil
}

// Download waits until the context's queued work is done, then copies device memory at
// src into dst.
func Download[T any](dst []T, src cuda.Deviceptr) error {
	n := uint64(len(dst)) * uint64(unsafe.Sizeof(*new(T)))
	if n == 0 {
		return nil
	}
	if err := cuda.CtxSynchronize(); err != nil {
		return fmt.Errorf("cuCtxSynchronize before cuMemcpyDtoH of %d bytes: %w", n, err)
	}
	if err := cuda.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), src, n); err != nil {
		return fmt.Errorf("cuMemcpyDtoH of %d bytes from %#x: %w", n, uint64(src), err)
	}
	return nil
}

// Fill sets bytes bytes of device memory at dst to value and returns once they are set.
func Fill(dst cuda.Deviceptr, value byte, bytes int) error {
	if bytes < 0 {
		return fmt.Errorf("fill of %d bytes: the size is negative", bytes)
	}
	if bytes == 0 {
		return nil
	}
	if err := cuda.MemsetD8(dst, value, uint64(bytes)); err != nil {
		return fmt.Errorf("cuMemsetD8 of %d bytes at %#x: %w", bytes, uint64(dst), err)
	}
	if err := cuda.CtxSynchronize(); err != nil {
		return fmt.Errorf("cuCtxSynchronize after cuMemsetD8 of %d bytes: %w", bytes, err)
	}
	return nil
}
