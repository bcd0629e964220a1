package mpi

import (
	"log/slog"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// Option configures New. The options of the NCCL backend that Communicator.NewNCCL
// brings up are nccl.Option values.
type Option func(*options)

type options struct {
	log       *slog.Logger
	closeWait time.Duration
	minProcs  int         // WithMinGOMAXPROCS; 0: leave GOMAXPROCS alone
	fr        frOption    // WithFlightRecorder (flightrec.go)
	check     checkOption // WithCollectiveCheck (collcheck.go)
}

func newOptions(opts []Option) options {
	o := options{log: slog.Default(), closeWait: 10 * time.Second}
	core.Apply(&o, opts)
	if o.log == nil {
		o.log = slog.Default()
	}
	return o
}

// WithLogger sets the logger for initialisation and teardown events (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithCloseTimeout bounds Close's wait for the operations still pending (default 10
// seconds).
func WithCloseTimeout(d time.Duration) Option { return func(o *options) { o.closeWait = d } }
