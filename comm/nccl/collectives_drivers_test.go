package nccl

import (
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// The driver calls of the collectives in collectives.go, for the test drivers.

func (stubDriver) Reduce(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.RedOp, _ int, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) AlltoAll(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) Gather(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ int, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) Scatter(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ int, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}

func (stubDriver) RedOpCreatePreMulSum(gpulib.Comm, gpulib.DataType, uint64, bool) (gpulib.RedOp, error) {
	return 5, nil
}
func (stubDriver) RedOpDestroy(gpulib.Comm, gpulib.RedOp) error { return nil }
