package commtest_test

import (
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
)

// Two ranks of comm's NCCL backend, on simulated GPUs, sum a bfloat16 buffer.
func ExampleNewCluster() {
	cluster, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	// Each rank's buffer holds 3 bfloat16 values: rank 0 {1, 2, 3}, rank 1 {0.5, 0.25, -3}.
	inputs := [][]float64{{1, 2, 3}, {0.5, 0.25, -3}}
	bufs := make([]comm.DevicePtr, 2)
	for rank := range 2 {
		bufs[rank], err = cluster.Alloc(rank, 3*comm.BFloat16.Size())
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := cluster.WriteValues(rank, bufs[rank], comm.BFloat16, inputs[rank]); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Every rank calls the collective, each from its own goroutine, as separate
	// processes would.
	var wg sync.WaitGroup
	for rank, b := range cluster.Backends() {
		wg.Go(func() {
			if err := b.AllReduce(bufs[rank], 3*comm.BFloat16.Size()); err != nil {
				fmt.Println("rank", rank, err)
			}
		})
	}
	wg.Wait()

	for rank := range 2 {
		sum, err := cluster.ReadValues(rank, bufs[rank], comm.BFloat16, 3)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("rank", rank, sum)
	}
	// Output:
	// rank 0 [1.5 2.25 0]
	// rank 1 [1.5 2.25 0]
}
