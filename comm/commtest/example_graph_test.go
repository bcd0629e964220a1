package commtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// A captured decode step: each rank records an all-reduce on its compute stream into
// a graph once, then replays it every step on new activations; Sync during the capture
// is refused with ErrCapturing.
func ExampleCluster_BeginCapture() {
	cluster, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	ctx := context.Background()

	acts := make([]comm.DevicePtr, 2)
	graphs := make([]*commtest.Graph, 2)
	streams := make([]comm.Stream, 2)
	for rank, cc := range cluster.Communicators() {
		acts[rank], _ = cluster.Alloc(rank, 8)
		streams[rank], _ = cluster.NewStream(rank)
		onCompute, err := cc.(*nccl.Communicator).OnStream(streams[rank])
		if err == nil {
			err = cluster.BeginCapture(rank, streams[rank])
		}
		if err == nil {
			if serr := onCompute.Sync(ctx); errors.Is(serr, nccl.ErrCapturing) && rank == 0 {
				fmt.Println("sync during capture:", nccl.ErrCapturing)
			}
			err = onCompute.AllReduce(acts[rank], 2, comm.Float32, comm.Sum)
		}
		if err == nil {
			graphs[rank], err = cluster.EndCapture(rank, streams[rank])
		}
		if err != nil {
			fmt.Println("rank", rank, err)
			return
		}
	}
	for step := 1; step <= 3; step++ {
		for rank := range 2 {
			_ = cluster.WriteValues(rank, acts[rank], comm.Float32, []float64{float64(step), float64(10 * rank)})
			if err := graphs[rank].Launch(streams[rank]); err != nil {
				fmt.Println(err)
				return
			}
		}
		for rank := range 2 {
			_ = cluster.SyncStream(rank, streams[rank])
		}
		got, _ := cluster.ReadValues(0, acts[0], comm.Float32, 2)
		fmt.Println("step", step, got)
	}
	// Output:
	// sync during capture: stream is capturing into a CUDA graph
	// step 1 [2 10]
	// step 2 [4 10]
	// step 3 [6 10]
}
