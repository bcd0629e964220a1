package comm

import (
	"context"
	"log/slog"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/rawdriver"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

type config struct {
	elem      DType
	log       *slog.Logger
	timeout   time.Duration
	closeWait time.Duration
	poll      time.Duration
	name      string
	device    int
	reconnect func(ctx context.Context, generation int) (UniqueID, error)
	// twoRankMax is the two-rank path's threshold in bytes (WithTwoRankThreshold).
	twoRankMax int
	driver     gpulib.Driver // WithDriver; nil: the real libraries
	job        jobConfig     // Connect and JoinJob (job.go)
	watch      watchConfig   // the health watchdog (watchdog.go)
	nccl       ncclSettings  // ncclConfig_t fields (config_nccl.go)
	minProcs   int           // WithMinGOMAXPROCS (mpi.go); 0: leave GOMAXPROCS alone
}

// defaults is the configuration before options.
func defaults() config {
	return config{
		elem:      BFloat16,
		log:       slog.Default(),
		timeout:   10 * time.Minute,
		closeWait: 10 * time.Second,
		poll:      time.Millisecond,
		device:    -1,

		twoRankMax: defaultTwoRankThreshold,
	}
}

// defaultTwoRankThreshold is comm/nccl's DefaultTwoRankThreshold.
const defaultTwoRankThreshold = 1 << 20

// jobConfig holds the settings of Connect and JoinJob.
type jobConfig struct {
	job      *rendezvous.Config        // WithJob; nil: torchrun's environment
	external bool                      // WithExternalStore
	torch    []rendezvous.ServerOption // WithTorchClients
	owns     bool                      // Connect: the backend owns the job (closing it closes the job)
	member   jobMember                 // set by Job.NewNCCL: the rank's place in its group
}

// watchConfig holds the watchdog's settings.
type watchConfig struct {
	interval time.Duration // 0: no watchdog
	abort    bool
}

// ncclSettings are the ncclConfig_t fields set by options, applied to every
// communicator the backend creates (initialisation, reconnect, Split, Shrink).
type ncclSettings struct {
	blocking bool
	netName  string
	ints     []gpulib.ConfigInt
	bad      []string // settings outside int32, reported by checkConfig
}

// jobMember is a backend's place in a group of a job (comm/job), as the NCCL backend
// sees it.
type jobMember interface {
	// Reconnect is the backend's ReconnectFunc: a rendezvous in the next generation.
	Reconnect(ctx context.Context, generation int) (UniqueID, error)
	// Shrunk gives the backend of a Shrink of this member's communicator (rank of
	// world) its own place in the job, and says whether that backend holds a reference
	// on the job (taken already).
	Shrunk(rank, world int) (m jobMember, owns bool)
	// Own records that the backend holds a reference on the job (Connect).
	Own()
	// Release drops the backend's reference on the job: the last step of its Close.
	Release() error
}

// driverFor returns the configured driver, else the real libraries for a device
// ordinal (-1: rank modulo the visible devices).
func driverFor(cfg config, device, rank int) (gpulib.Driver, error) {
	if cfg.driver != nil {
		return cfg.driver, nil
	}
	return rawdriver.New(device, rank)
}

// jobDevice is the device a rank uses: WithDevice's, or the local rank's.
func jobDevice(cfg config, localRank int) int {
	if cfg.device >= 0 {
		return cfg.device
	}
	return localRank
}
