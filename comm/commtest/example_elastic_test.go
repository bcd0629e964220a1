package commtest_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// An elastic job on the simulator: 8 ranks; rank 7's process dies; the 7 survivors
// Shrink to a communicator of 7 ranks and go on; a replacement process Joins when the
// survivors Grow it back to 8. An AllReduce of each rank's (rank+1) checks each size.
func Example_elasticJob() {
	ctx := context.Background()
	c, err := commtest.NewCluster(8, commtest.WithCommOptions(nccl.WithElementType(comm.Float32)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	bs := make([]*nccl.Backend, 8)
	for r := range bs {
		if bs[r], err = c.NCCL(r); err != nil {
			fmt.Println(err)
			return
		}
	}

	// allReduce sums one float32 per rank over bs (rank r gives r+1; dev[r] is rank
	// r's device) and prints what every rank got.
	allReduce := func(bs []*nccl.Backend, dev []int) {
		sums := make([]float64, len(bs))
		errs := make([]error, len(bs))
		var wg sync.WaitGroup
		for r, b := range bs {
			wg.Go(func() {
				p, err := c.Alloc(dev[r], 4)
				if err == nil {
					err = c.WriteValues(dev[r], p, comm.Float32, []float64{float64(r + 1)})
				}
				if err == nil {
					err = b.AllReduce(p, 4)
				}
				var v []float64
				if err == nil {
					v, err = c.ReadValues(dev[r], p, comm.Float32, 1)
				}
				if err == nil {
					sums[r] = v[0]
				}
				errs[r] = err
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				fmt.Println("rank", r, err)
				return
			}
		}
		same := true
		for _, s := range sums {
			same = same && s == sums[0]
		}
		fmt.Printf("%d ranks: every rank got %v: %v\n", len(bs), sums[0], same)
	}
	allReduce(bs, []int{0, 1, 2, 3, 4, 5, 6, 7})

	// Rank 7's process dies (its backend goes with it); the survivors shrink without it.
	if err := c.Kill(7); err != nil {
		fmt.Println(err)
		return
	}
	_ = bs[7].Close() // a dead rank's teardown fails: only the simulation needs it
	shrunk := make([]*nccl.Backend, 7)
	errs := make([]error, 7)
	var wg sync.WaitGroup
	for r := range shrunk {
		wg.Go(func() { shrunk[r], errs[r] = bs[r].Shrink(ctx, []int{7}) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Println("shrink: rank", r, err)
			return
		}
	}
	allReduce(shrunk, []int{0, 1, 2, 3, 4, 5, 6})

	// A replacement process starts on device 7 and joins when the survivors grow the
	// communicator back to 8 ranks. Rank 0 makes the id and hands it over (a job
	// passes it through its store).
	if err := c.Revive(7); err != nil {
		fmt.Println(err)
		return
	}
	id, err := shrunk[0].GrowID()
	if err != nil {
		fmt.Println(err)
		return
	}
	grown := make([]*nccl.Backend, 8)
	errs = make([]error, 8)
	for r := range shrunk {
		wg.Go(func() {
			var root *comm.UniqueID
			if r == 0 {
				root = &id
			}
			grown[r], errs[r] = shrunk[r].Grow(ctx, 8, root)
		})
	}
	wg.Go(func() {
		dev, err := c.DeviceOption(7)
		if err == nil {
			grown[7], err = nccl.Join(ctx, id, 7, 8, dev, nccl.WithElementType(comm.Float32))
		}
		errs[7] = err
	})
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Println("grow: rank", r, err)
			return
		}
	}
	allReduce(grown, []int{0, 1, 2, 3, 4, 5, 6, 7})
	for _, b := range append(shrunk, grown...) {
		if err := b.Close(); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// 8 ranks: every rank got 36: true
	// 7 ranks: every rank got 28: true
	// 8 ranks: every rank got 36: true
}
