package nccl

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
)

// BenchmarkWatchdogOverhead compares an enqueue (the typed AllReduce, which does not
// wait) on a communicator with a running watchdog (default interval) and on one
// without, in the same run: the watchdog's cost on the hot path is one atomic load per
// operation and one clock read per interval.
func BenchmarkWatchdogOverhead(b *testing.B) {
	plain := newStubNCCL(b, stubDriver{}).Communicator()
	wb, err := newNCCL(context.Background(), stubDriver{}, comm.UniqueID{}, 0, 2, newConfig([]Option{bf16, quiet, WithWatchdog(0)}))
	require.NoError(b, err)
	defer wb.Close()
	watched := wb.Communicator()
	call := func(c *Communicator) func(int) {
		return func(n int) {
			for range n {
				_ = c.AllReduce(p, 1024, comm.Float32, comm.Sum)
			}
		}
	}
	wa := testing.AllocsPerRun(100, func() { _ = watched.AllReduce(p, 1024, comm.Float32, comm.Sum) })
	pa := testing.AllocsPerRun(100, func() { _ = plain.AllReduce(p, 1024, comm.Float32, comm.Sum) })
	b.ResetTimer()
	tw, tp := pairbench.Alternate(b.N, 512, call(watched), call(plain))
	n := float64(b.N)
	b.ReportMetric(float64(tw.Nanoseconds())/n, "watched-ns/op")
	b.ReportMetric(float64(tp.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(float64(tw)/float64(tp), "watched/plain")
	b.ReportMetric(wa, "watched-allocs/op")
	b.ReportMetric(pa, "plain-allocs/op")
}
