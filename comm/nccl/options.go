package nccl

import (
	"context"
	"log/slog"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// Option configures a backend or communicator at construction.
type Option func(*ncclcfg.Config)

// ReconnectFunc supplies the unique id of the next communicator generation when a
// backend re-creates its communicator (AttemptReconnect). generation counts from 1 for
// the first replacement; every rank must receive the same id for the same generation
// (typically rank 0 creates it and a rendezvous store distributes it).
type ReconnectFunc func(ctx context.Context, generation int) (comm.UniqueID, error)

// WithElementType sets the element type a Backend reduces. It is required: New and
// the job constructors fail without it (there is no default).
func WithElementType(t comm.DType) Option { return func(c *ncclcfg.Config) { c.Elem = t } }

// WithLogger sets the logger for teardown and health events (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *ncclcfg.Config) { c.Log = l } }

// WithTimeout bounds how long an operation that the host waits for (AllReduce,
// AllGather, ReduceScatter, Broadcast, Sync, Barrier, initialisation) may take before it
// fails with ErrTimeout and the communicator becomes unhealthy (default 10 minutes,
// like PyTorch's watchdog). 0 or less means no bound beyond the caller's context.
// RecvCommandU32 is bounded by its context only.
func WithTimeout(d time.Duration) Option { return func(c *ncclcfg.Config) { c.Timeout = d } }

// WithCloseTimeout bounds Close's best-effort wait for pending work and its graceful
// finalize before it aborts the communicator (default 10 seconds).
func WithCloseTimeout(d time.Duration) Option { return func(c *ncclcfg.Config) { c.CloseWait = d } }

// WithPollInterval sets the longest pause between two checks while the host waits for
// the device or for NCCL (default 1ms; the first checks follow each other closely).
func WithPollInterval(d time.Duration) Option { return func(c *ncclcfg.Config) { c.Poll = d } }

// WithName names the communicator in NCCL's logs (ncclConfig_t.commName).
func WithName(name string) Option { return func(c *ncclcfg.Config) { c.Name = name } }

// WithDevice selects the CUDA device ordinal the rank uses (default: the rank modulo the
// number of visible devices).
func WithDevice(ordinal int) Option { return func(c *ncclcfg.Config) { c.Device = ordinal } }

// WithReconnect enables AttemptReconnect on the NCCL backend: it aborts the failed
// communicator and initialises a new one from the id f returns.
func WithReconnect(f ReconnectFunc) Option { return func(c *ncclcfg.Config) { c.Reconnect = f } }

func newConfig(opts []Option) ncclcfg.Config { return ncclcfg.New(opts) }
