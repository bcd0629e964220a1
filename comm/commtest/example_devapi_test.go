package commtest_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Four ranks on two simulated nodes of two GPUs: each rank reads its communicator's
// properties and teams, and makes the device communicator a kernel written against
// NCCL's device API would take as a parameter.
func ExampleWithMachine() {
	cluster, err := commtest.NewCluster(4, commtest.WithElementType(comm.BFloat16), commtest.WithMachine(commtest.Machine{GPUsPerNode: 2}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lines := make([]string, 4)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Go(func() {
			b, err := cluster.NCCL(rank)
			if err != nil {
				lines[rank] = err.Error()
				return
			}
			c := b.Communicator()
			p, err := c.Properties()
			if err != nil {
				lines[rank] = err.Error()
				return
			}
			lsa, _ := c.TeamLSA()
			rail, _ := c.TeamRail()
			// A collective call: every rank makes its own.
			dc, err := c.NewDevComm(ctx, nccl.DevCommRequirements{LSABarriers: 1})
			if err != nil {
				lines[rank] = err.Error()
				return
			}
			defer dc.Close()
			lines[rank] = fmt.Sprintf("rank %d: %d LSA teams; LSA team %+v, rail %+v; %d bytes for the kernel",
				rank, p.LSATeams, lsa, rail, len(dc.Bytes()))
		})
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// rank 0: 2 LSA teams; LSA team {Size:2 Rank:0 Stride:1}, rail {Size:2 Rank:0 Stride:2}; 240 bytes for the kernel
	// rank 1: 2 LSA teams; LSA team {Size:2 Rank:1 Stride:1}, rail {Size:2 Rank:0 Stride:2}; 240 bytes for the kernel
	// rank 2: 2 LSA teams; LSA team {Size:2 Rank:0 Stride:1}, rail {Size:2 Rank:1 Stride:2}; 240 bytes for the kernel
	// rank 3: 2 LSA teams; LSA team {Size:2 Rank:1 Stride:1}, rail {Size:2 Rank:1 Stride:2}; 240 bytes for the kernel
}
