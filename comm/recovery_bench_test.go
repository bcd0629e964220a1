package comm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
)

// BenchmarkWatchdogOverhead compares an enqueue (the typed AllReduce, which does not
// wait) on a communicator with a running watchdog (default interval) and on one
// without, in the same run: the watchdog's cost on the hot path is one atomic load per
// operation and one clock read per interval.
func BenchmarkWatchdogOverhead(b *testing.B) {
	plain := newStubNCCL(b, stubDriver{}).Communicator()
	wb, err := newNCCL(context.Background(), stubDriver{}, UniqueID{}, 0, 2, newConfig([]Option{quiet, WithWatchdog(0)}))
	require.NoError(b, err)
	defer wb.Close()
	watched := wb.Communicator()
	call := func(c *NCCLCommunicator) func(int) {
		return func(n int) {
			for range n {
				_ = c.AllReduce(p, 1024, Float32, Sum)
			}
		}
	}
	wa := testing.AllocsPerRun(100, func() { _ = watched.AllReduce(p, 1024, Float32, Sum) })
	pa := testing.AllocsPerRun(100, func() { _ = plain.AllReduce(p, 1024, Float32, Sum) })
	b.ResetTimer()
	tw, tp := pairbench.Alternate(b.N, 512, call(watched), call(plain))
	n := float64(b.N)
	b.ReportMetric(float64(tw.Nanoseconds())/n, "watched-ns/op")
	b.ReportMetric(float64(tp.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(float64(tw)/float64(tp), "watched/plain")
	b.ReportMetric(wa, "watched-allocs/op")
	b.ReportMetric(pa, "plain-allocs/op")
}

// BenchmarkConnect brings up world ranks (goroutines, each with its own fake device)
// through Connect: rank 0 serves the store on loopback, every rank meets the others in
// generation 0 and initialises its communicator; then all close. It reports the time
// of one whole bring-up and its time per rank, to show how it grows with the world.
func BenchmarkConnect(b *testing.B) {
	for _, world := range []int{8, 64, 256} {
		b.Run(fmt.Sprint("ranks=", world), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				port := freePort(b)
				b.StartTimer()
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				bs := make([]*NCCL, world)
				errs := make([]error, world)
				var wg sync.WaitGroup
				for r := range world {
					wg.Go(func() {
						bs[r], errs[r] = Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(stubDriver{}), quiet)
					})
				}
				wg.Wait()
				total += time.Since(start)
				cancel()
				b.StopTimer()
				for r := range world {
					require.NoError(b, errs[r], "rank %d", r)
				}
				for r := world - 1; r >= 0; r-- { // rank 0, which serves the store, last
					require.NoError(b, bs[r].Close())
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/bringup")
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/float64(world), "us/rank")
		})
	}
}
