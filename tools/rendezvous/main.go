// Command rendezvous runs the ncclgo rendezvous store on its own, for jobs whose rank 0
// should not embed it:
//
//	export NCCLGO_TOKEN=$(go run ./tools/rendezvous -new-token)
//	go run ./tools/rendezvous -addr :29500
//
// Ranks then dial MASTER_ADDR:MASTER_PORT pointing at it. The token comes from
// NCCLGO_TOKEN (empty: no authentication); -new-token prints a random 256-bit one and
// exits. The token authenticates clients and server, but the traffic is plaintext
// unless -tls-cert and -tls-key give a certificate and key (clients then need
// rendezvous.WithTLS). It logs with log/slog to stderr and stops on SIGINT or SIGTERM,
// closing every connection.
//
// -world N sizes the connection slots for a job of N ranks as comm's rank 0 sizes its
// own store: a handshake slot per rank (-max-handshakes at least N), since every rank
// dials at bring-up, and two connections per rank (-max-conns at least 2N), one more
// while a rank reconnects; the defaults stay the floor and a limit given explicitly
// wins. Without it a job of more than 64 ranks that dial at once waits for handshake
// slots, and one of more than 512 ranks may find every connection slot taken. With
// -world, a barrier arrival for any other world is refused to its caller alone
// (rendezvous.WithWorld), so that no client can poison the job's barrier keys.
// -max-host-conns caps the connections of one source host, so that one host cannot
// take every slot (off by default; give it at least two per rank of the busiest host).
//
// -max-torch-value-bytes is the longest value a PyTorch TCPStore client may store
// (default 1 MiB); torch's own server has no limit and its protocol no error reply, so
// a client over it is disconnected and the server logs a warning naming this flag.
//
// -max-store-bytes is the server's whole memory budget; unless GOMEMLIMIT is set, the
// Go runtime's memory limit is set to it plus 32 MiB, so that the process's resident
// size follows what the budget counts.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv(rendezvous.EnvToken), os.Stdout, os.Stderr, nil); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "rendezvous:", err)
		}
		os.Exit(2)
	}
}

// run serves until ctx ends (or prints a token). ready, when not nil, receives the address listened on.
func run(ctx context.Context, args []string, token string, stdout, stderr io.Writer, ready chan<- net.Addr) error {
	fs := flag.NewFlagSet("rendezvous", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", ":29500", "TCP address to listen on")
	handshake := fs.Duration("handshake-timeout", rendezvous.DefaultHandshakeTimeout, "time a new connection has to say hello and authenticate")
	idle := fs.Duration("idle-timeout", rendezvous.DefaultIdleTimeout, "close connections silent for this long (negative: never)")
	maxConns := fs.Int("max-conns", rendezvous.DefaultMaxConns, "most connections at once (-world raises it to 2 per rank)")
	maxStore := fs.Int64("max-store-bytes", rendezvous.DefaultMaxStoreBytes, "memory budget of the whole server: keys, values, blocked requests, connections, buffers")
	maxClient := fs.Int64("max-client-bytes", 0, "most of the budget one client may hold (0: an eighth of it)")
	maxHandshakes := fs.Int("max-handshakes", rendezvous.DefaultMaxHandshakes, "most connections still in their handshake (-world raises it to 1 per rank)")
	maxTorchValue := fs.Int("max-torch-value-bytes", rendezvous.DefaultMaxTorchValueBytes, "longest value a PyTorch TCPStore client may store (torch's own server has no limit)")
	maxHostConns := fs.Int("max-host-conns", 0, "most connections from one host (0: no limit but -max-conns); at least 2 per rank it runs")
	world := fs.Int("world", 0, "ranks of the job the store serves, to size -max-conns and -max-handshakes and to refuse barriers of another world (0: unknown)")
	certFile := fs.String("tls-cert", "", "PEM certificate: serve TLS (with -tls-key)")
	keyFile := fs.String("tls-key", "", "PEM private key of -tls-cert")
	newToken := fs.Bool("new-token", false, "print a new random token for "+rendezvous.EnvToken+" and exit")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *newToken {
		_, err := fmt.Fprintln(stdout, rendezvous.NewToken())
		return err
	}
	if *maxTorchValue < 1 {
		return fmt.Errorf("-max-torch-value-bytes %d: want at least 1", *maxTorchValue)
	}
	if *world < 0 {
		return fmt.Errorf("-world %d: want the number of ranks, or 0 when unknown", *world)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["max-conns"] {
		*maxConns = max(*maxConns, 2**world)
	}
	if !set["max-handshakes"] {
		*maxHandshakes = max(*maxHandshakes, *world)
	}
	var tlsConfig *tls.Config
	switch {
	case (*certFile == "") != (*keyFile == ""):
		return fmt.Errorf("-tls-cert and -tls-key go together (got %q and %q)", *certFile, *keyFile)
	case *certFile != "":
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return fmt.Errorf("-tls-cert %q -tls-key %q: %w", *certFile, *keyFile, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && *maxStore > 0 {
		debug.SetMemoryLimit(*maxStore + 32<<20)
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *level, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if token == "" {
		log.Warn("rendezvous: no token in " + rendezvous.EnvToken + ": any client that reaches the port can read and write keys")
	}
	if tlsConfig == nil {
		log.Info("rendezvous: traffic is plaintext (-tls-cert and -tls-key turn on TLS)")
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
		rendezvous.WithMaxClientBytes(*maxClient),
		rendezvous.WithMaxHandshakes(*maxHandshakes),
		rendezvous.WithMaxHostConns(*maxHostConns),
		rendezvous.WithMaxTorchValueBytes(*maxTorchValue),
		rendezvous.WithTLS(tlsConfig),
		rendezvous.WithWorld(*world),
	)
	err = srv.Serve(ctx, l)
	_ = srv.Close()
	log.Info("rendezvous: stopped")
	return err
}
