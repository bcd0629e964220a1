package ncclcfg

import (
	"context"
	"log/slog"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/rawdriver"
)

type Config struct {
	Elem      comm.DType
	Log       *slog.Logger
	Timeout   time.Duration
	CloseWait time.Duration
	Poll      time.Duration
	Name      string
	Device    int
	Reconnect func(ctx context.Context, generation int) (comm.UniqueID, error)

	// InitIDs are the unique ids of a scalable initialisation (nccl.NewScalable), all
	// of them in order; nil: New's one id.
	InitIDs []comm.UniqueID
	// DriverOf, when set and Driver is not, gives the driver of a device ordinal
	// (commtest's simulated devices for nccl.NewAll).
	DriverOf func(device int) (gpulib.Driver, error)

	// twoRankMax is the two-rank path's threshold in bytes (WithTwoRankThreshold).
	TwoRankMax int
	Driver     gpulib.Driver // WithDriver; nil: the real libraries
	Job        JobConfig     // Connect and JoinJob (job.go)
	Watch      WatchConfig   // the health watchdog (watchdog.go)
	Nccl       Settings      // ncclConfig_t fields (config.go)
	// FlightRec is the flight recorder's ring size per communicator
	// (nccl.WithFlightRecorder): -1 the default (the environment's, else
	// flightrec.DefaultEntries), 0 off.
	FlightRec int
	// CollCheck is the collective check (nccl.WithCollectiveCheck): -1 the
	// environment's (core.CollCheckFromEnv), 0 off, 1 on. New resolves -1.
	CollCheck int
}

// defaults is the configuration before options.
func Defaults() Config {
	return Config{
		Elem:      core.ElemUnset,
		Log:       slog.Default(),
		Timeout:   10 * time.Minute,
		CloseWait: 10 * time.Second,
		Poll:      time.Millisecond,
		Device:    -1,

		TwoRankMax: DefaultTwoRankThreshold,
		FlightRec:  -1,
		CollCheck:  -1,
	}
}

// defaultTwoRankThreshold is comm/nccl's DefaultTwoRankThreshold.
const DefaultTwoRankThreshold = 1 << 20

// jobConfig holds the settings of Connect and JoinJob.
type JobConfig struct {
	Owns   bool   // Connect: the backend owns the job (closing it closes the job)
	Member Member // set by Job.NewNCCL: the rank's place in its group
}

// watchConfig holds the watchdog's settings.
type WatchConfig struct {
	Interval time.Duration // 0: no watchdog
	Abort    bool
}

// ncclSettings are the ncclConfig_t fields set by options, applied to every
// communicator the backend creates (initialisation, reconnect, Split, Shrink).
type Settings struct {
	Blocking bool
	NetName  string
	Ints     []gpulib.ConfigInt
	Bad      []string // settings outside int32, reported by checkConfig
}

// jobMember is a backend's place in a group of a job (comm/job), as the NCCL backend
// sees it.
type Member interface {
	// Reconnect is the backend's ReconnectFunc: a rendezvous in the next generation.
	Reconnect(ctx context.Context, generation int) (comm.UniqueID, error)
	// Shrunk gives the backend of a Shrink of this member's communicator (rank of
	// world) its own place in the job, and says whether that backend holds a reference
	// on the job (taken already).
	Shrunk(rank, world int) (m Member, owns bool)
	// Own records that the backend holds a reference on the job (Connect).
	Own()
	// Release drops the backend's reference on the job: the last step of its Close.
	Release() error
}

// driverFor returns the configured driver, else the real libraries for a device
// ordinal (-1: rank modulo the visible devices).
func DriverFor(cfg Config, device, rank int) (gpulib.Driver, error) {
	if cfg.Driver != nil {
		return cfg.Driver, nil
	}
	if cfg.DriverOf != nil {
		if device < 0 {
			device = rank
		}
		return cfg.DriverOf(device)
	}
	return rawdriver.New(device, rank)
}

// jobDevice is the device a rank uses: WithDevice's, or the local rank's.
func JobDevice(cfg Config, localRank int) int {
	if cfg.Device >= 0 {
		return cfg.Device
	}
	return localRank
}

// New applies opts (comm/nccl's Option values, or any function of a Config) to the
// defaults.
func New[O ~func(*Config)](opts []O) Config {
	c := Defaults()
	core.Apply(&c, opts)
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.CollCheck < 0 {
		on, err := core.CollCheckFromEnv()
		if err != nil {
			c.Log.Warn("comm: collective check off", "err", err)
		}
		c.CollCheck = 0
		if on {
			c.CollCheck = 1
		}
	}
	return c
}

// Use is an option that replaces the whole configuration with c, driven by d: comm/job
// and comm/mpi pass the configuration they completed (the device they opened, job
// membership) to nccl.New.
func Use(c Config, d gpulib.Driver) func(*Config) {
	c.Driver = d
	return func(to *Config) { *to = c }
}

// MemberOf returns the job membership of a comm/nccl Backend (nil for none), for
// comm/job's tests; comm/nccl sets it.
var MemberOf func(b any) Member

// WithDriver is the option (a comm/nccl Option) that makes a backend drive d instead of
// the real CUDA and NCCL libraries: comm/commtest's simulator, and comm's tests' fakes.
// It is not part of comm/nccl's public API, since only comm's own packages can make a
// gpulib.Driver.
func WithDriver(d gpulib.Driver) func(*Config) { return func(c *Config) { c.Driver = d } }
