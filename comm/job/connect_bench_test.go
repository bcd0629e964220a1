package job

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/nccl"
)

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
				bs := make([]*nccl.Backend, world)
				errs := make([]error, world)
				var wg sync.WaitGroup
				for r := range world {
					wg.Go(func() {
						bs[r], errs[r] = Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(newIDFake()), quiet)
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
