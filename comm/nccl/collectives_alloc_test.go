package nccl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// oldStub is stubDriver reporting NCCL 2.22.3: no ncclAlltoAll, ncclGather, ncclScatter.
type oldStub struct{ stubDriver }

func (oldStub) Version() (int, error) { return 22203, nil }

// TestTypedCollectivesDoNotAllocate checks that the collectives of collectives.go, the
// typed API on a caller's stream and PreMulSum operators allocate nothing in comm on
// success, on both the native and the grouped send/recv paths.
func TestTypedCollectivesDoNotAllocate(t *testing.T) {
	for name, d := range map[string]gpulib.Driver{"nccl-2.29.7": stubDriver{}, "nccl-2.22.3": oldStub{}} {
		t.Run(name, func(t *testing.T) {
			c := newStubNCCL(t, d).Communicator()
			v, err := c.OnStream(3)
			require.NoError(t, err)
			op, err := c.PreMulSum(comm.Float32, 0.5)
			require.NoError(t, err)
			counts, displs := []int{3, 5}, []int{0, 3}
			calls := map[string]func(){
				"AllReduceInto":            func() { _ = c.AllReduceInto(p, p+4096, 16, comm.Float32, comm.Sum) },
				"BroadcastInto":            func() { _ = c.BroadcastInto(p, p+4096, 16, comm.Float32, 1) },
				"Reduce":                   func() { _ = c.Reduce(p, p+4096, 16, comm.Float32, comm.Max, 0) },
				"AllToAll":                 func() { _ = c.AllToAll(p, p+4096, 16, comm.Float32) },
				"AllToAllv":                func() { _ = c.AllToAllv(p, counts, displs, p+4096, counts, displs, comm.Float32) },
				"Gather":                   func() { _ = c.Gather(p, p+4096, 16, comm.Float32, 0) },
				"Scatter":                  func() { _ = c.Scatter(p, p+4096, 16, comm.Float32, 0) },
				"StreamComm.AllReduce":     func() { _ = v.AllReduce(p, 16, comm.Float32, comm.Sum) },
				"StreamComm.AllToAll":      func() { _ = v.AllToAll(p, p+4096, 16, comm.Float32) },
				"AllReduce with PreMulSum": func() { _ = c.AllReduce(p, 16, comm.Float32, op) },
			}
			for name, call := range calls {
				call()
				assert.Zero(t, testing.AllocsPerRun(200, call), name)
			}
		})
	}
}

// BenchmarkTypedOverhead measures comm's own cost per typed operation over a driver
// that does nothing, against the communicator's plain AllReduce in the same run.
func BenchmarkTypedOverhead(b *testing.B) {
	for _, tc := range []struct {
		name string
		d    gpulib.Driver
	}{{"native", stubDriver{}}, {"grouped", oldStub{}}} {
		c := newStubNCCL(b, tc.d).Communicator()
		v, err := c.OnStream(3)
		require.NoError(b, err)
		for name, call := range map[string]func(){
			"AllReduce":            func() { _ = c.AllReduce(p, 1024, comm.Float32, comm.Sum) },
			"StreamComm.AllReduce": func() { _ = v.AllReduce(p, 1024, comm.Float32, comm.Sum) },
			"AllReduceInto":        func() { _ = c.AllReduceInto(p, p+4096, 1024, comm.Float32, comm.Sum) },
			"AllToAll":             func() { _ = c.AllToAll(p, p+8192, 512, comm.Float32) },
			"Gather":               func() { _ = c.Gather(p, p+8192, 512, comm.Float32, 0) },
		} {
			b.Run(tc.name+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					call()
				}
			})
		}
	}
}
