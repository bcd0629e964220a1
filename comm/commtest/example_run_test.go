package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Every rank runs the engine's step in its own goroutine; a deadline turns a hang into
// an error that names the ranks still running, and each failure names its rank.
func ExampleRunRanks() {
	cluster, err := commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32)))
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
	step := func(ctx context.Context, rank int, b comm.Backend) error {
		return b.AllReduce(bufs[rank], 8)
	}
	if err := commtest.RunRanks(ctx, cluster.Backends(), step); err != nil {
		var re *commtest.RanksError
		if errors.As(err, &re) && len(re.Running) > 0 {
			fmt.Println("hung ranks:", re.Running)
		}
		fmt.Println(err)
		return
	}
	for rank := range 2 {
		sum, _ := cluster.ReadValues(rank, bufs[rank], comm.Float32, 2)
		fmt.Println("rank", rank, sum)
	}
	// Output:
	// rank 0 [2 1]
	// rank 1 [2 1]
}
