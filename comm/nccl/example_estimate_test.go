package nccl_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Estimate a Group's time before launching it (ncclGroupSimulateEnd): the estimate
// launches nothing and keeps the operations, which Submit then launches. The
// simulator's estimate is a model of NCCL's tuner, not a GPU figure.
func ExampleGroup_Estimate() {
	cluster, err := commtest.NewCluster(2, commtest.WithCommOptions(
		nccl.WithElementType(comm.Float32), nccl.WithBlocking(true))) // Estimate needs blocking communicators
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	bufs := make([]comm.DevicePtr, 2)
	for rank := range 2 {
		if bufs[rank], err = cluster.Alloc(rank, 8); err != nil {
			fmt.Println(err)
			return
		}
		if err := cluster.WriteValues(rank, bufs[rank], comm.Float32, []float64{1, float64(rank)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	estimates := make([]time.Duration, 2)
	step := func(ctx context.Context, rank int, b *nccl.Backend) error {
		g := nccl.NewGroup()
		if err := g.Add(func() error { return b.AllReduce(bufs[rank], 8) }); err != nil {
			return err
		}
		d, err := g.Estimate() // nothing launched yet
		if err != nil {
			return err
		}
		estimates[rank] = d
		return g.Submit() // launches the same all-reduce
	}
	if err := commtest.RunRanks(ctx, cluster.NCCLs(), step); err != nil {
		fmt.Println(err)
		return
	}
	for rank := range 2 {
		sum, _ := cluster.ReadValues(rank, bufs[rank], comm.Float32, 2)
		fmt.Println("rank", rank, "estimated:", estimates[rank] > 0, "sum:", sum)
	}
	// Output:
	// rank 0 estimated: true sum: [2 1]
	// rank 1 estimated: true sum: [2 1]
}
