package job

import (
	"log/slog"

	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Option configures JoinJob and Connect. Options of the NCCL backends the Job creates
// are nccl.Option values, passed through WithNCCL (or to Job.NewNCCL directly).
type Option func(*options)

type options struct {
	log      *slog.Logger
	job      *rendezvous.Config        // WithJob; nil: torchrun's environment
	external bool                      // WithExternalStore
	torch    []rendezvous.ServerOption // WithTorchClients
	nccl     []nccl.Option             // WithNCCL, WithLogger: for every backend of the Job
	ids      int                       // WithScalableInit; 0: one unique id
	idsSet   bool
}

func newOptions(opts []Option) options {
	o := options{log: slog.Default()}
	core.Apply(&o, opts)
	if o.log == nil {
		o.log = slog.Default()
	}
	return o
}

// WithJob describes the job (store address, rank, world size, local rank, token) for
// Connect and JoinJob, instead of torchrun's environment variables (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, NCCLGO_TOKEN). Build it with
// rendezvous.FromEnv and its options to override only some of them.
func WithJob(j rendezvous.Config) Option { return func(o *options) { o.job = &j } }

// WithExternalStore makes rank 0 use a store that runs on its own (tools/rendezvous) at
// MASTER_ADDR:MASTER_PORT instead of serving one itself. With an external store a
// restarted rank 0 rejoins the job; with the embedded one the job ends with rank 0.
func WithExternalStore() Option { return func(o *options) { o.external = true } }

// WithTorchClients decides whether rank 0's store answers clients that speak PyTorch's
// TCPStore protocol. That protocol has no authentication: a torch client that reaches
// the store's port can read and write every key, whatever the job's token. So without
// this option rank 0's store answers torch clients only when the job has no token
// (NCCLGO_TOKEN); WithTorchClients(true) lets them in on a token-protected store too,
// and WithTorchClients(false) refuses them always. It changes nothing where rank 0
// serves no store (WithExternalStore, torchrun's agent store). See
// rendezvous.WithTorchClients.
func WithTorchClients(allow bool) Option {
	return func(o *options) { o.torch = []rendezvous.ServerOption{rendezvous.WithTorchClients(allow)} }
}

// WithLogger sets the logger of the Job (bring-up, store) and of the backends it creates
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		o.log = l
		o.nccl = append(o.nccl, nccl.WithLogger(l))
	}
}

// WithNCCL passes options to every NCCL backend the Job creates (Connect's, and
// Job.NewNCCL's before its own options).
func WithNCCL(opts ...nccl.Option) Option {
	return func(o *options) { o.nccl = append(o.nccl, opts...) }
}

// WithScalableInit makes Connect and Job.NewNCCL initialise the communicator from ids
// unique ids instead of one (ncclCommInitRankScalable, NCCL >= 2.23.4; nccl.NewScalable),
// for large jobs: NCCL's bootstrap then goes through ids roots instead of rank 0 alone.
// Every rank must give the same ids, from 1 to the world size. The ranks NCCL's
// documentation recommends create them, spread evenly over the ranks (for 3 ids on 7
// ranks: ranks 0, 3 and 5, the first ranks of blocks of 3, 2 and 2), and publish them in
// the generation of the bring-up; every rank reads them all. AttemptReconnect
// initialises from rank 0's id alone, as nccl.NewScalable's reconnects do. With an older
// NCCL, bring-up returns comm.ErrUnsupported naming the version needed.
func WithScalableInit(ids int) Option {
	return func(o *options) { o.ids, o.idsSet = ids, true }
}
