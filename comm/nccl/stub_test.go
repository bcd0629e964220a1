package nccl

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// stubDriver answers every call at once with success and allocates nothing: the layer
// below comm reduced to nothing, so that what remains is comm's own cost.
type stubDriver struct{}

func (stubDriver) SetDevice() error                                                 { return nil }
func (stubDriver) MemAlloc(uint64) (gpulib.Ptr, error)                              { return 0x10000, nil }
func (stubDriver) MemFree(gpulib.Ptr) error                                         { return nil }
func (stubDriver) MemcpyDtoDAsync(_, _ gpulib.Ptr, _ uint64, _ gpulib.Stream) error { return nil }
func (stubDriver) StreamCreate() (gpulib.Stream, error)                             { return 7, nil }
func (stubDriver) StreamDestroy(gpulib.Stream) error                                { return nil }
func (stubDriver) StreamSynchronize(gpulib.Stream) error                            { return nil }
func (stubDriver) StreamQuery(gpulib.Stream) (bool, error)                          { return true, nil }
func (stubDriver) StreamIsCapturing(gpulib.Stream) (bool, error)                    { return false, nil }
func (stubDriver) EventCreate() (gpulib.Event, error)                               { return 9, nil }
func (stubDriver) EventDestroy(gpulib.Event) error                                  { return nil }
func (stubDriver) EventRecord(gpulib.Event, gpulib.Stream) error                    { return nil }
func (stubDriver) EventQuery(gpulib.Event) (bool, error)                            { return true, nil }
func (stubDriver) StreamWaitEvent(gpulib.Stream, gpulib.Event) error                { return nil }
func (stubDriver) LaunchKernel(gpulib.Function, uint32, uint32, gpulib.Stream, gpulib.KernelArgs) error {
	return nil
}
func (stubDriver) MultiprocessorCount() (int, error)     { return 132, nil }
func (stubDriver) Version() (int, error)                 { return 22907, nil }
func (stubDriver) GetUniqueID() (gpulib.UniqueID, error) { return gpulib.UniqueID{}, nil }
func (stubDriver) CommInitRank(int, gpulib.UniqueID, int, gpulib.Config) (gpulib.Comm, error) {
	return 1, nil
}
func (stubDriver) CommGetAsyncError(gpulib.Comm) (gpulib.Result, error) { return gpulib.Success, nil }
func (stubDriver) LastError(gpulib.Comm) string                         { return "" }
func (stubDriver) CommFinalize(gpulib.Comm) error                       { return nil }
func (stubDriver) CommDestroy(gpulib.Comm) error                        { return nil }
func (stubDriver) CommAbort(gpulib.Comm) error                          { return nil }
func (stubDriver) CommSplit(gpulib.Comm, int, int, gpulib.Config) (gpulib.Comm, error) {
	return 2, nil
}
func (stubDriver) CommShrink(gpulib.Comm, []int, gpulib.Config, int) (gpulib.Comm, error) {
	return 3, nil
}
func (stubDriver) CommRevoke(gpulib.Comm, int) error { return nil }
func (stubDriver) AllReduce(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) Broadcast(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ int, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) AllGather(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) ReduceScatter(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	return nil
}
func (stubDriver) Send(gpulib.Ptr, uint64, gpulib.DataType, int, gpulib.Comm, gpulib.Stream) error {
	return nil
}
func (stubDriver) Recv(gpulib.Ptr, uint64, gpulib.DataType, int, gpulib.Comm, gpulib.Stream) error {
	return nil
}
func (stubDriver) GroupStart() error { return nil }
func (stubDriver) GroupEnd() error   { return nil }
func (d stubDriver) Submit(calls []gpulib.Call) (int, error) {
	return len(calls), nil
}
func (stubDriver) CommRegister(gpulib.Comm, gpulib.Ptr, uint64) (gpulib.Handle, error) {
	return 5, nil
}
func (stubDriver) CommDeregister(gpulib.Comm, gpulib.Handle) error { return nil }
func (stubDriver) MemAllocNCCL(uint64) (gpulib.Ptr, error)         { return 0x20000, nil }
func (stubDriver) MemFreeNCCL(gpulib.Ptr) error                    { return nil }
func (stubDriver) CommWindowRegister(gpulib.Comm, gpulib.Ptr, uint64, int) (gpulib.Handle, error) {
	return 6, nil
}
func (stubDriver) CommWindowDeregister(gpulib.Comm, gpulib.Handle) error { return nil }

func newStubNCCL(tb testing.TB, d gpulib.Driver) *Backend {
	tb.Helper()
	b, err := newNCCL(context.Background(), d, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet}))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// TestHotPathsDoNotAllocate checks the steady-state operations allocate nothing in
// comm (the driver here allocates nothing either).
func TestHotPathsDoNotAllocate(t *testing.T) {
	b := newStubNCCL(t, stubDriver{})
	c := b.Communicator()
	s, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	calls := map[string]func(){
		"AllReduce":              func() { _ = b.AllReduce(p, 4096) },
		"AllReduceAsync":         func() { _ = b.AllReduceAsync(p, 4096, 3) },
		"AllGather":              func() { _ = b.AllGather(p, p+8192, 4096) },
		"ReduceScatter":          func() { _ = b.ReduceScatter(p, p+8192, 4096) },
		"Broadcast":              func() { _ = b.Broadcast(p, 4096, 1) },
		"Barrier":                func() { _ = b.Barrier() },
		"SendTo":                 func() { _ = b.SendTo(p, 4096, 1, 3) },
		"RecvFrom":               func() { _ = b.RecvFrom(p, 4096, 1, 3) },
		"IsHealthy":              func() { _ = b.IsHealthy() },
		"Communicator.AllReduce": func() { _ = c.AllReduce(p, 16, comm.Float32, comm.Max) },
		"Communicator.Sync":      func() { _ = c.Sync(context.Background()) },
		"Single.AllReduce":       func() { _ = s.AllReduce(p, 4096) },
		"grouped exchange": func() {
			_ = b.GroupStart()
			_ = b.SendTo(p, 64, 1, 3)
			_ = b.RecvFrom(p+64, 64, 1, 3)
			_ = b.GroupEnd()
		},
	}
	for name, call := range calls {
		call()
		assert.Zero(t, testing.AllocsPerRun(200, call), name)
	}
}

// BenchmarkOverhead measures comm's own cost per operation: the NCCL backend over a
// driver that does nothing.
func BenchmarkOverhead(b *testing.B) {
	nb := newStubNCCL(b, stubDriver{})
	b.Run("AllReduce", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = nb.AllReduce(p, 4096)
		}
	})
	b.Run("AllReduceAsync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = nb.AllReduceAsync(p, 4096, 3)
		}
	})
	b.Run("SendTo", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = nb.SendTo(p, 4096, 1, 3)
		}
	})
}
