// Command rendezvous runs the ncclgo rendezvous store on its own, for jobs whose rank 0
// should not embed it:
//
//	NCCLGO_TOKEN=s3cret go run ./tools/rendezvous -addr :29500
//
// Ranks then dial MASTER_ADDR:MASTER_PORT pointing at it. The token comes from
// NCCLGO_TOKEN (empty: no authentication). It logs with log/slog to stderr and stops
// on SIGINT or SIGTERM, closing every connection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv(rendezvous.EnvToken), os.Stderr, nil); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "rendezvous:", err)
		}
		os.Exit(2)
	}
}

// run serves until ctx ends. ready, when not nil, receives the address listened on.
func run(ctx context.Context, args []string, token string, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("rendezvous", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":29500", "TCP address to listen on")
	handshake := fs.Duration("handshake-timeout", rendezvous.DefaultHandshakeTimeout, "time a new connection has to say hello and authenticate")
	idle := fs.Duration("idle-timeout", rendezvous.DefaultIdleTimeout, "close connections silent for this long (negative: never)")
	maxConns := fs.Int("max-conns", rendezvous.DefaultMaxConns, "most connections at once")
	maxStore := fs.Int64("max-store-bytes", rendezvous.DefaultMaxStoreBytes, "most bytes of keys and values held")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *level, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if token == "" {
		log.Warn("rendezvous: no token in " + rendezvous.EnvToken + ": any client that reaches the port can read and write keys")
	}

	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %q: %w", *addr, err)
	}
	if ready != nil {
		ready <- l.Addr()
	}
	srv := rendezvous.NewServer(
		rendezvous.WithToken(token),
		rendezvous.WithLogger(log),
		rendezvous.WithHandshakeTimeout(*handshake),
		rendezvous.WithIdleTimeout(*idle),
		rendezvous.WithMaxConns(*maxConns),
		rendezvous.WithMaxStoreBytes(*maxStore),
	)
	err = srv.Serve(ctx, l)
	_ = srv.Close()
	log.Info("rendezvous: stopped")
	return err
}
