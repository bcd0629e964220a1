package flightrec

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"time"
)

// DumpOnSignal writes the dump (WriteFile) each time one of sigs arrives, until ctx
// is done: an operator can then ask every rank of a hung job for its dump (with
// SIGUSR1, say: kill -USR1 on each rank, or on mpirun, which forwards SIGUSR1 and
// SIGUSR2 to its ranks). log (nil: slog.Default) says where each dump went, or why it
// could not be written. It returns at once; the signals are handled on a goroutine of
// their own, and released when ctx is done.
//
// A signal that asks the process to end (SIGTERM, as mpirun sends when it aborts a
// job; SIGINT, SIGHUP, SIGQUIT) is not swallowed: after the dump, DumpOnSignal stops
// handling it and raises it again, so that it does what it would have done without
// DumpOnSignal (the process ends by the signal, unless it ignores the signal or
// another signal.Notify channel of the program takes it; such a channel gets it
// twice). The other signals of sigs stay handled.
func (r *Recorder) DumpOnSignal(ctx context.Context, log *slog.Logger, sigs ...os.Signal) {
	if r == nil || len(sigs) == 0 {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-ch:
				if path, err := r.WriteFile(); err != nil {
					log.Error("flightrec: dump on signal failed", "signal", s.String(), "err", err)
				} else {
					log.Info("flightrec: dump written", "signal", s.String(), "path", path)
				}
				if !ending(s) {
					continue
				}
				// Hand s back: with no channel left for it, the runtime gives it its
				// default action again.
				signal.Stop(ch)
				sigs = slices.DeleteFunc(sigs, func(x os.Signal) bool { return x == s })
				if len(sigs) > 0 {
					signal.Notify(ch, sigs...)
				}
				if err := raise(s); err != nil {
					log.Error("flightrec: signal not raised again after the dump", "signal", s.String(), "err", err)
				}
				if len(sigs) == 0 {
					return
				}
			}
		}
	}()
}

// KeyChecker is what DumpOnKey needs of a key-value store: rendezvous.Store and
// PyTorch's TCPStore client (comm/rendezvous) have it.
type KeyChecker interface {
	Check(ctx context.Context, keys ...string) ([]bool, error)
}

// DefaultKeyInterval is how often DumpOnKey checks the store unless told otherwise.
const DefaultKeyInterval = 2 * time.Second

// DumpOnKey writes the dump each time the next key of the sequence <key>/1,
// <key>/2, ... appears in the store s, until ctx is done: an operator sets
// "<key>/1" once (any value) and every rank watching the key dumps, then "<key>/2"
// for the next dump. It checks every interval (0: DefaultKeyInterval), one Check
// request, as PyTorch's ranks poll their store for a dump signal. log (nil:
// slog.Default) says where each dump went, or why it could not be written; a failed
// Check is logged once until one succeeds again. It returns at once.
func (r *Recorder) DumpOnKey(ctx context.Context, s KeyChecker, key string, interval time.Duration, log *slog.Logger) {
	if r == nil || s == nil {
		return
	}
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultKeyInterval
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		next, failing := 1, false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			k := key + "/" + strconv.Itoa(next)
			found, err := s.Check(ctx, k)
			if err != nil || len(found) != 1 {
				if !failing && ctx.Err() == nil {
					log.Warn("flightrec: dump key check failed", "key", k, "err", err)
				}
				failing = true
				continue
			}
			failing = false
			if !found[0] {
				continue
			}
			next++
			if path, err := r.WriteFile(); err != nil {
				log.Error("flightrec: dump on key failed", "key", k, "err", err)
			} else {
				log.Info("flightrec: dump written", "key", k, "path", path)
			}
		}
	}()
}
