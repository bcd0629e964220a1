package comm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// stubDriver answers every call at once with success and allocates nothing: the layer
// below comm reduced to nothing, so that what remains is comm's own cost.
type stubDriver struct{}

func (stubDriver) SetDevice() error                                             { return nil }
func (stubDriver) MemAlloc(uint64) (seam.Ptr, error)                            { return 0x10000, nil }
func (stubDriver) MemFree(seam.Ptr) error                                       { return nil }
func (stubDriver) MemcpyDtoDAsync(_, _ seam.Ptr, _ uint64, _ seam.Stream) error { return nil }
func (stubDriver) StreamCreate() (seam.Stream, error)                           { return 7, nil }
func (stubDriver) StreamDestroy(seam.Stream) error                              { return nil }
func (stubDriver) StreamSynchronize(seam.Stream) error                          { return nil }
func (stubDriver) StreamQuery(seam.Stream) (bool, error)                        { return true, nil }
func (stubDriver) EventCreate() (seam.Event, error)                             { return 9, nil }
func (stubDriver) EventDestroy(seam.Event) error                                { return nil }
func (stubDriver) EventRecord(seam.Event, seam.Stream) error                    { return nil }
func (stubDriver) EventQuery(seam.Event) (bool, error)                          { return true, nil }
func (stubDriver) StreamWaitEvent(seam.Stream, seam.Event) error                { return nil }
func (stubDriver) LaunchKernel(seam.Function, uint32, uint32, seam.Stream, seam.KernelArgs) error {
	return nil
}
func (stubDriver) MultiprocessorCount() (int, error)   { return 132, nil }
func (stubDriver) Version() (int, error)               { return 22907, nil }
func (stubDriver) GetUniqueID() (seam.UniqueID, error) { return seam.UniqueID{}, nil }
func (stubDriver) CommInitRank(int, seam.UniqueID, int, seam.Config) (seam.Comm, error) {
	return 1, nil
}
func (stubDriver) CommGetAsyncError(seam.Comm) (seam.Result, error) { return seam.Success, nil }
func (stubDriver) CommFinalize(seam.Comm) error                     { return nil }
func (stubDriver) CommDestroy(seam.Comm) error                      { return nil }
func (stubDriver) CommAbort(seam.Comm) error                        { return nil }
func (stubDriver) CommSplit(seam.Comm, int, int, seam.Config) (seam.Comm, error) {
	return 2, nil
}
func (stubDriver) CommShrink(seam.Comm, []int, seam.Config, int) (seam.Comm, error) {
	return 3, nil
}
func (stubDriver) CommRevoke(seam.Comm, int) error { return nil }
func (stubDriver) AllReduce(_, _ seam.Ptr, _ uint64, _ seam.DataType, _ seam.RedOp, _ seam.Comm, _ seam.Stream) error {
	return nil
}
func (stubDriver) Broadcast(_, _ seam.Ptr, _ uint64, _ seam.DataType, _ int, _ seam.Comm, _ seam.Stream) error {
	return nil
}
func (stubDriver) AllGather(_, _ seam.Ptr, _ uint64, _ seam.DataType, _ seam.Comm, _ seam.Stream) error {
	return nil
}
func (stubDriver) ReduceScatter(_, _ seam.Ptr, _ uint64, _ seam.DataType, _ seam.RedOp, _ seam.Comm, _ seam.Stream) error {
	return nil
}
func (stubDriver) Send(seam.Ptr, uint64, seam.DataType, int, seam.Comm, seam.Stream) error {
	return nil
}
func (stubDriver) Recv(seam.Ptr, uint64, seam.DataType, int, seam.Comm, seam.Stream) error {
	return nil
}
func (stubDriver) GroupStart() error { return nil }
func (stubDriver) GroupEnd() error   { return nil }
func (stubDriver) CommRegister(seam.Comm, seam.Ptr, uint64) (seam.Handle, error) {
	return 5, nil
}
func (stubDriver) CommDeregister(seam.Comm, seam.Handle) error { return nil }
func (stubDriver) MemAllocNCCL(uint64) (seam.Ptr, error)       { return 0x20000, nil }
func (stubDriver) MemFreeNCCL(seam.Ptr) error                  { return nil }
func (stubDriver) CommWindowRegister(seam.Comm, seam.Ptr, uint64, int) (seam.Handle, error) {
	return 6, nil
}
func (stubDriver) CommWindowDeregister(seam.Comm, seam.Handle) error { return nil }

func newStubNCCL(tb testing.TB, d seam.Driver) *NCCL {
	tb.Helper()
	b, err := newNCCL(context.Background(), d, UniqueID{}, 0, 2, newConfig([]Option{quiet}))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// TestHotPathsDoNotAllocate checks the steady-state operations allocate nothing in
// comm (the driver here allocates nothing either).
func TestHotPathsDoNotAllocate(t *testing.T) {
	b := newStubNCCL(t, stubDriver{})
	c := b.Communicator()
	s, err := NewSingle()
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
		"Communicator.AllReduce": func() { _ = c.AllReduce(p, 16, Float32, Max) },
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
