package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Rank 0 embeds the server and publishes an id under this generation's key; rank 1
// blocks on Get until it appears. Both prove the shared token.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const token = "s3cret" // in a job: NCCLGO_TOKEN, read by FromEnv

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := rendezvous.NewServer(rendezvous.WithToken(token), rendezvous.WithLogger(slog.New(slog.DiscardHandler)))
	go func() { _ = srv.Serve(ctx, l) }()
	defer srv.Close()

	key := rendezvous.GenerationKey("demo", 0, "uid")
	var wg sync.WaitGroup
	for rank := range 2 {
		wg.Go(func() {
			c, err := rendezvous.Dial(ctx, l.Addr().String(), rendezvous.WithToken(token))
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			if rank == 0 {
				if err := c.Set(ctx, key, []byte("128 bytes of NCCL unique id")); err != nil {
					fmt.Println(err)
				}
				return
			}
			id, err := c.Get(ctx, key) // blocks until rank 0 has set it
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("rank 1 got %q\n", id)
		})
	}
	wg.Wait()
	// Output: rank 1 got "128 bytes of NCCL unique id"
}

// A barrier whose deadline expires names the ranks that never came.
func ExampleClient_Barrier() {
	srv := rendezvous.NewServer(rendezvous.WithLogger(slog.New(slog.DiscardHandler)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = srv.Serve(context.Background(), l) }()
	defer srv.Close()

	c, err := rendezvous.Dial(context.Background(), l.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // long enough for rank 0 to arrive on a busy machine
	defer cancel()
	// Rank 0 of 3 arrives; ranks 1 and 2 never do.
	err = c.Barrier(ctx, rendezvous.GenerationKey("demo", 0, "barrier"), 0, 3)
	var be *rendezvous.BarrierError
	if errors.As(err, &be) {
		fmt.Println("missing ranks:", be.Missing)
	}
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// missing ranks: [1 2]
	// true
}

// FromEnv reads torchrun's variables; options override them.
func ExampleFromEnv() {
	cfg, err := rendezvous.FromEnv(
		rendezvous.WithMaster("127.0.0.1", 29500),
		rendezvous.WithRank(0, 1),
		rendezvous.WithLocalRank(0),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Addr(), cfg.Rank, cfg.WorldSize)
	_, err = rendezvous.FromEnv(rendezvous.WithMaster("127.0.0.1", 0), rendezvous.WithRank(0, 1), rendezvous.WithLocalRank(0))
	fmt.Println(err)
	// Output:
	// 127.0.0.1:29500 0 1
	// MASTER_PORT="0": must be in 1..65535
}
