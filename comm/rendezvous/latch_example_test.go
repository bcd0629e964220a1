package rendezvous_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Three ranks bring up a job, each in one request: rank 0 arrives with the id, every
// rank with its marker, and each is answered once all three have arrived, the others
// with rank 0's id.
func ExampleClient_Arrive() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := rendezvous.NewServer(rendezvous.WithLogger(slog.New(slog.DiscardHandler)))
	go func() { _ = srv.Serve(ctx, l) }()
	defer srv.Close()

	const world = 3
	key := func(name string) string { return rendezvous.GenerationKey("demo", 0, name) }
	ids := make([]string, world)
	var wg sync.WaitGroup
	for rank := range world {
		wg.Go(func() {
			c, err := rendezvous.Dial(ctx, l.Addr().String())
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			a := rendezvous.Arrival{Done: key("state"), DoneValue: []byte("ok"), Counter: key("count"), Target: world,
				Create: []rendezvous.KeyValue{{Key: key("rank/" + strconv.Itoa(rank)), Value: []byte{1}}}}
			if rank == 0 {
				a.Create = append(a.Create, rendezvous.KeyValue{Key: key("uid"), Value: []byte("rank 0's id")})
			} else {
				a.Read = []string{key("uid")}
			}
			got, err := c.Arrive(ctx, a) // answered once all have arrived
			switch {
			case err != nil:
				fmt.Println(err)
			case got.Conflict >= 0 || got.Closed:
				fmt.Printf("rank %d arrived before, or too late\n", rank)
			case rank == 0:
				ids[rank] = string(a.Create[1].Value)
			default:
				ids[rank] = string(got.Values[0])
			}
		})
	}
	wg.Wait()
	fmt.Println(ids)
	// Output: [rank 0's id rank 0's id rank 0's id]
}
