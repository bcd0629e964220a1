package rendezvous_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// A Go rank speaks PyTorch's TCPStore protocol: here to ncclgo's own server, which
// answers torch clients on the same port as its own and shares the keys with them
// (a Python torch.distributed.TCPStore, or torchrun's agent store, works the same).
func ExampleDialTCPStore() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := rendezvous.WithLogger(slog.New(slog.DiscardHandler))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := rendezvous.NewServer(quiet)
	go func() { _ = srv.Serve(ctx, l) }()
	defer srv.Close()

	// As torchrun's workers do in restart 0.
	ts, err := rendezvous.DialTCPStore(ctx, l.Addr().String(), rendezvous.WithKeyPrefix(rendezvous.AgentStorePrefix(0)), quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ts.Close()
	if err := ts.Set(ctx, "engine/uid", []byte("id-from-torch-side")); err != nil {
		fmt.Println(err)
		return
	}
	n, _ := ts.Add(ctx, "engine/arrived", 1)
	fmt.Println("protocol", ts.Protocol(), "arrived", n)

	// ncclgo's own protocol sees the torch key "//worker/attempt_0/engine/uid" as
	// "/worker/attempt_0/engine/uid".
	c, err := rendezvous.Dial(ctx, l.Addr().String(), quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	v, err := c.Get(ctx, "/worker/attempt_0/engine/uid")
	fmt.Println(string(v), err)
	// Output:
	// protocol 2 arrived 1
	// id-from-torch-side <nil>
}

// Ranks that are TCPStore clients of ncclgo's server meet at a countdown latch in one
// request each, as Client.Arrive's do; on torch's own server ServesArrivals is false
// and a bring-up makes its calls one after the other instead.
func ExampleTCPStoreClient_Arrive() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := rendezvous.WithLogger(slog.New(slog.DiscardHandler))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := rendezvous.NewServer(quiet)
	go func() { _ = srv.Serve(ctx, l) }()
	defer srv.Close()

	const world = 3
	answers := make(chan string, world)
	for rank := range world {
		go func() {
			ts, err := rendezvous.DialTCPStore(ctx, l.Addr().String(), quiet)
			if err != nil {
				answers <- err.Error()
				return
			}
			defer ts.Close()
			if ok, err := ts.ServesArrivals(ctx); err != nil || !ok {
				answers <- fmt.Sprint("no arrivals here: ", err)
				return
			}
			a := rendezvous.Arrival{Done: "job/ready", DoneValue: []byte("ok"), Counter: "job/count", Target: world,
				Create: []rendezvous.KeyValue{{Key: fmt.Sprintf("job/rank/%d", rank), Value: []byte{1}}}}
			if rank == 0 {
				a.Create = append(a.Create, rendezvous.KeyValue{Key: "job/id", Value: []byte("the id")})
			} else {
				a.Read = []string{"job/id"}
			}
			got, err := ts.Arrive(ctx, a) // answered once all three have arrived
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- fmt.Sprintf("done %s, values %q", got.Done, got.Values)
		}()
	}
	seen := map[string]int{}
	for range world {
		seen[<-answers]++
	}
	fmt.Println(seen)
	// Output:
	// map[done ok, values ["the id"]:2 done ok, values []:1]
}
