package commtest_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Disaggregated prefill and decode: ranks 0 and 1 compute the KV cache of a prompt and
// push one block to each decode rank (2 and 3) with PutSignal into the decoder's
// window; the decoders, which take no part in the puts, WaitSignal for one signal from
// each prefill rank on their stream and then read every byte.
func ExampleCluster_NCCL_prefillDecode() {
	const (
		prefill = 2
		decode  = 2
		block   = 2048 // bytes of one KV block
		window  = 4096 // NCCL windows are multiples of 4096 bytes
	)
	cluster, err := commtest.NewCluster(prefill+decode, commtest.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	ctx := context.Background()
	kv := func(p, d, i int) byte { return byte(p*31 + d*7 + i) } // block p sends to d

	report := make([]string, prefill+decode)
	var wg sync.WaitGroup
	for rank := range prefill + decode {
		wg.Go(func() {
			b, err := cluster.NCCL(rank)
			if err != nil {
				report[rank] = err.Error()
				return
			}
			// Every rank registers the same windows, in the same order (a collective
			// call): the inbox that prefill ranks put into, and the outbox that a put
			// reads from (NCCL needs the source inside a symmetric window too).
			mem, err := b.SymmetricAlloc(2 * window)
			if err != nil {
				report[rank] = err.Error()
				return
			}
			inbox, err := b.RegisterWindow(ctx, mem, window)
			if err != nil {
				report[rank] = err.Error()
				return
			}
			outbox := mem + window
			if _, err := b.RegisterWindow(ctx, outbox, window); err != nil {
				report[rank] = err.Error()
				return
			}
			if rank < prefill {
				for d := prefill; d < prefill+decode; d++ {
					src := outbox + comm.DevicePtr((d-prefill)*block)
					data := make([]byte, block)
					for i := range data {
						data[i] = kv(rank, d, i)
					}
					if err := cluster.Write(rank, src, data); err != nil {
						report[rank] = err.Error()
						return
					}
					// Prefill rank p's block lands at offset p*block of d's inbox.
					if err := b.PutSignal(src, block, d, inbox, rank*block, nccl.Signal{}, 0); err != nil {
						report[rank] = err.Error()
						return
					}
				}
				if err := b.Communicator().Sync(ctx); err != nil {
					report[rank] = err.Error()
					return
				}
				report[rank] = fmt.Sprintf("prefill rank %d: sent %d blocks", rank, decode)
				return
			}
			waits := []nccl.SignalWait{{Peer: 0, Count: 1}, {Peer: 1, Count: 1}}
			if err := b.WaitSignal(waits, 0); err != nil {
				report[rank] = err.Error()
				return
			}
			if err := b.Communicator().Sync(ctx); err != nil {
				report[rank] = err.Error()
				return
			}
			got, err := cluster.Read(rank, mem, prefill*block)
			if err != nil {
				report[rank] = err.Error()
				return
			}
			bad := 0
			for p := range prefill {
				for i := range block {
					if got[p*block+i] != kv(p, rank, i) {
						bad++
					}
				}
			}
			report[rank] = fmt.Sprintf("decode rank %d: %d bytes from %d prefill ranks, %d wrong", rank, len(got), prefill, bad)
		})
	}
	wg.Wait()
	for _, line := range report {
		fmt.Println(line)
	}
	// Output:
	// prefill rank 0: sent 2 blocks
	// prefill rank 1: sent 2 blocks
	// decode rank 2: 4096 bytes from 2 prefill ranks, 0 wrong
	// decode rank 3: 4096 bytes from 2 prefill ranks, 0 wrong
}
