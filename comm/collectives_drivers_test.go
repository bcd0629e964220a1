package comm

import "github.com/ncclgo/ncclgo/comm/internal/gpulib"

// The driver calls of the collectives in collectives.go, for the test drivers.

func (f *fakeDriver) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Reduce", count, dt, op, root, s)
}
func (f *fakeDriver) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("AlltoAll", count, dt, s)
}
func (f *fakeDriver) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Gather", count, dt, root, s)
}
func (f *fakeDriver) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Scatter", count, dt, root, s)
}

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

func (f *fakeDriver) RedOpCreatePreMulSum(c gpulib.Comm, dt gpulib.DataType, scalar uint64, device bool) (gpulib.RedOp, error) {
	return gpulib.RedOp(5), f.rec("RedOpCreatePreMulSum", dt, scalar, device)
}
func (f *fakeDriver) RedOpDestroy(c gpulib.Comm, op gpulib.RedOp) error {
	return f.rec("RedOpDestroy", op)
}

func (stubDriver) RedOpCreatePreMulSum(gpulib.Comm, gpulib.DataType, uint64, bool) (gpulib.RedOp, error) {
	return 5, nil
}
func (stubDriver) RedOpDestroy(gpulib.Comm, gpulib.RedOp) error { return nil }
