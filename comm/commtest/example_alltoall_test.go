package commtest_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Mixture-of-experts dispatch: two ranks exchange tokens with AllToAll on a caller's
// stream, then average a gradient with a PreMulSum operator (each rank scales its input
// by 1/2 before NCCL sums).
func ExampleCluster_Communicators_allToAll() {
	cluster, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	ctx := context.Background()

	// Rank r's send buffer: block j (2 values) is for rank j.
	tokens := [][]float64{{1, 2, 3, 4}, {10, 20, 30, 40}}
	send, recv := make([]comm.DevicePtr, 2), make([]comm.DevicePtr, 2)
	for rank := range 2 {
		send[rank], _ = cluster.Alloc(rank, 16)
		recv[rank], _ = cluster.Alloc(rank, 16)
		_ = cluster.WriteValues(rank, send[rank], comm.Float32, tokens[rank])
	}
	var wg sync.WaitGroup
	for rank, cc := range cluster.Communicators() {
		wg.Go(func() {
			c := cc.(*nccl.Communicator)
			s, err := cluster.NewStream(rank) // the engine's compute stream
			if err != nil {
				fmt.Println(err)
				return
			}
			onCompute, err := c.OnStream(s)
			if err == nil {
				err = onCompute.AllToAll(send[rank], recv[rank], 2, comm.Float32)
			}
			var avg comm.ReduceOp
			if err == nil {
				avg, err = c.PreMulSum(comm.Float32, 0.5)
			}
			if err == nil {
				err = onCompute.AllReduce(send[rank], 4, comm.Float32, avg)
			}
			if err == nil {
				err = onCompute.Sync(ctx)
			}
			if err != nil {
				fmt.Println("rank", rank, err)
			}
		})
	}
	wg.Wait()
	for rank := range 2 {
		got, _ := cluster.ReadValues(rank, recv[rank], comm.Float32, 4)
		mean, _ := cluster.ReadValues(rank, send[rank], comm.Float32, 4)
		fmt.Println("rank", rank, "received", got, "mean", mean)
	}
	// Output:
	// rank 0 received [1 2 10 20] mean [5.5 11 16.5 22]
	// rank 1 received [3 4 30 40] mean [5.5 11 16.5 22]
}
