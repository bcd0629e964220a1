package commtest_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
)

// BenchmarkClusterAllReduce measures a blocking bf16 AllReduce through comm's NCCL
// backend on the simulator, next to a host copy of the same bytes (the baseline, in the
// same run): the simulator's cost is the ratio of the two.
func BenchmarkClusterAllReduce(b *testing.B) {
	for _, bytes := range []int{4 << 10, 1 << 20} {
		for _, n := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", n, bytes), func(b *testing.B) {
				c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ps := make([]comm.DevicePtr, n)
				for r := range n {
					if ps[r], err = c.Alloc(r, bytes); err != nil {
						b.Fatal(err)
					}
				}
				bs := c.Backends()
				b.SetBytes(int64(bytes))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					var wg sync.WaitGroup
					for r := 1; r < n; r++ {
						wg.Go(func() { _ = bs[r].AllReduce(ps[r], bytes) })
					}
					if err := bs[0].AllReduce(ps[0], bytes); err != nil {
						b.Fatal(err)
					}
					wg.Wait()
				}
			})
		}
		b.Run(fmt.Sprintf("baseline-host-copy/bytes=%d", bytes), func(b *testing.B) {
			src, dst := make([]byte, bytes), make([]byte, bytes)
			b.SetBytes(int64(bytes))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}
