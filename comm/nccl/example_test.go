package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Each rank of a multi-GPU job builds the NCCL backend from a shared unique id (rank 0
// creates it; a rendezvous store carries it to the others), then reduces on its own
// stream. The arguments are checked before any GPU work: here rank 2 of a world of 2 is
// refused, on any machine, so the example runs without a GPU.
func ExampleNew() {
	ctx := context.Background()
	var id comm.UniqueID // from rank 0's nccl.NewUniqueID, via the rendezvous store
	rank, world := 2, 2  // from the launcher: RANK, WORLD_SIZE
	b, err := nccl.New(ctx, id, rank, world, nccl.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Println(errors.Is(err, comm.ErrInvalidRank))
		return
	}
	defer b.Close()
	var computeStream comm.Stream // where the engine's kernels run
	if err := b.AllReduceAsync(0x7f0000000000, 1<<20, computeStream); err != nil {
		log.Print(err)
	}
	// Output: true
}
