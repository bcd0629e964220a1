package nccl_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// A Group collects operations on several backends (here the world's and a pair's, as a
// pipeline stage's all-reduce and a tensor-parallel one) and launches them together:
// Submit makes one crossing into NCCL and returns once both results exist. Each rank
// keeps its Group and reuses it for every step. The ranks run on commtest's simulator.
func ExampleGroup() {
	cluster, err := commtest.NewCluster(4, commtest.WithCommOptions(nccl.WithElementType(comm.Float32)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pairs, err := cluster.SplitBackends(ctx, func(rank int) int { return rank / 2 })
	if err != nil {
		fmt.Println(err)
		return
	}
	world := cluster.Backends()
	sums := make([][2]float64, 4)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Go(func() {
			a, _ := cluster.Alloc(rank, 4)
			b, _ := cluster.Alloc(rank, 4)
			_ = cluster.WriteValues(rank, a, comm.Float32, []float64{float64(rank + 1)})
			_ = cluster.WriteValues(rank, b, comm.Float32, []float64{float64(rank + 1)})
			g := comm.NewGroup(world[rank]) // an nccl.Group: world[rank] is an *nccl.Backend
			err := g.Add(func() error {
				if err := world[rank].AllReduce(a, 4); err != nil {
					return err
				}
				return pairs[rank].AllReduce(b, 4)
			})
			if err == nil {
				err = g.Submit() // both all-reduces, in one crossing; waits for them
			}
			if err != nil {
				fmt.Println(err)
				return
			}
			va, _ := cluster.ReadValues(rank, a, comm.Float32, 1)
			vb, _ := cluster.ReadValues(rank, b, comm.Float32, 1)
			sums[rank] = [2]float64{va[0], vb[0]}
		})
	}
	wg.Wait()
	for _, b := range pairs {
		_ = b.Close()
	}
	for rank, s := range sums {
		fmt.Printf("rank %d: world sum %v, pair sum %v\n", rank, s[0], s[1])
	}
	// Output:
	// rank 0: world sum 10, pair sum 3
	// rank 1: world sum 10, pair sum 3
	// rank 2: world sum 10, pair sum 7
	// rank 3: world sum 10, pair sum 7
}
