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
