package flightrec

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
)

// DumpOnSignal writes the dump (WriteFile) each time one of sigs arrives, until ctx
// is done: an operator can then ask every rank of a hung job for its dump (with
// SIGUSR1, say: kill -USR1 on each rank, or pdsh). log (nil: slog.Default) says
// where each dump went, or why it could not be written. It returns at once; the
// signals are handled on a goroutine of their own, and released when ctx is done.
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
			}
		}
	}()
}
