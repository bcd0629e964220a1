package commtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest/internal/sim"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Cluster is a world of ranks running comm's NCCL backend on a simulated machine: one
// simulated device per rank, connected by a simulated NCCL. It is safe for concurrent
// use. Close it to release every goroutine it started.
type Cluster struct {
	w   *sim.World
	n   int
	cfg clusterConfig

	mu       sync.Mutex
	backends []*nccl.Backend // nil for a memory-only cluster (SingleHarness)
	ids      map[int]gpulib.UniqueID
	base     []int // per rank: the cluster generation its backend counts from

	closeOnce sync.Once
	closeErr  error
}

type clusterConfig struct {
	comm        []nccl.Option
	rankComm    func(rank int) []nccl.Option
	sim         []sim.Option
	initTimeout time.Duration
	closeWait   time.Duration
	reconnect   bool
	version     int // WithNCCLVersion; 0: the simulator's default
}

// Option configures a Cluster.
type Option func(*clusterConfig)

// WithCommOptions passes options to every rank's backend (nccl.WithElementType,
// nccl.WithTimeout, ...).
func WithCommOptions(opts ...nccl.Option) Option {
	return func(c *clusterConfig) { c.comm = append(c.comm, opts...) }
}

// WithRankCommOptions passes, after WithCommOptions's, the options opts returns for
// each rank to that rank's backend: ranks configured apart, as processes of a real job
// may be (one rank with a flight recorder, a name per rank, ...).
func WithRankCommOptions(opts func(rank int) []nccl.Option) Option {
	return func(c *clusterConfig) { c.rankComm = opts }
}

// WithNCCLVersion sets the NCCL version the simulated library reports (default 22907,
// 2.29.7); functions newer than it are missing, as with a real older library.
func WithNCCLVersion(v int) Option {
	return func(c *clusterConfig) { c.sim, c.version = append(c.sim, sim.WithVersion(v)), v }
}

// WithMemoryLimit caps each simulated device's memory (default: no limit).
func WithMemoryLimit(bytes uint64) Option {
	return func(c *clusterConfig) { c.sim = append(c.sim, sim.WithMemoryLimit(bytes)) }
}

// WithInProgress makes every communication call on the backends' non-blocking
// communicators return ncclInProgress and report it for the next polls polls, the way
// NCCL does while it connects, so that the backend's polling paths run.
func WithInProgress(polls int) Option {
	return func(c *clusterConfig) { c.sim = append(c.sim, sim.WithInProgress(polls)) }
}

// WithReconnect gives every backend a nccl.WithReconnect function that hands all ranks
// the same new unique id for each generation, so that AttemptReconnect works when every
// rank calls it; Replace brings a killed rank back into such a generation.
func WithReconnect() Option {
	return func(c *clusterConfig) { c.reconnect = true }
}

// WithInitTimeout bounds NewCluster's wait for every rank's communicator (default 30s).
func WithInitTimeout(d time.Duration) Option {
	return func(c *clusterConfig) { c.initTimeout = d }
}

// WithElementType sets the element type every rank's backend reduces: the same as
// WithCommOptions(nccl.WithElementType(t)).
func WithElementType(t comm.DType) Option {
	return WithCommOptions(nccl.WithElementType(t))
}

// elementTypeOption names the options that set the element type, for NewCluster's error.
const elementTypeOption = "commtest.WithElementType(t) or commtest.WithCommOptions(nccl.WithElementType(t))"

// NewCluster starts n ranks of comm's NCCL backend, each on its own simulated device,
// sharing one communicator. As with nccl.New, the element type is required: pass
// WithElementType (or nccl.WithElementType through WithCommOptions or
// WithRankCommOptions); without it NewCluster fails with ErrInvalidType.
func NewCluster(n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("new cluster: %d ranks: need at least 1: %w", n, comm.ErrInvalidSize)
	}
	cfg := clusterConfig{initTimeout: 30 * time.Second, closeWait: time.Minute}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for r := range n {
		if err := core.CheckWorld("new-cluster", r, n, cfg.elem(r), elementTypeOption); err != nil {
			return nil, err
		}
	}
	w, err := sim.New(n, cfg.sim...)
	if err != nil {
		return nil, fmt.Errorf("new cluster: %w", err)
	}
	c := &Cluster{w: w, n: n, backends: make([]*nccl.Backend, n), cfg: cfg,
		ids: map[int]gpulib.UniqueID{0: w.NewUniqueID()}, base: make([]int, n)}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.initTimeout)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			b, err := c.start(ctx, r, 0)
			if err != nil {
				errs[r] = err
				return
			}
			c.mu.Lock()
			c.backends[r] = b
			c.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("new cluster of %d ranks: %w", n, err)
	}
	return c, nil
}

// elem is the element type rank's options set (core.ElemUnset for none).
func (c *clusterConfig) elem(rank int) comm.DType {
	nc := ncclcfg.Defaults()
	for _, o := range c.comm {
		if o != nil {
			o(&nc)
		}
	}
	if c.rankComm != nil {
		for _, o := range c.rankComm(rank) {
			if o != nil {
				o(&nc)
			}
		}
	}
	return nc.Elem
}

// start creates rank's backend in the communicator of cluster generation gen.
func (c *Cluster) start(ctx context.Context, rank, gen int) (*nccl.Backend, error) {
	d, err := c.w.Driver(rank)
	if err != nil {
		return nil, err
	}
	opts := slices.Clone(c.cfg.comm)
	if c.cfg.rankComm != nil {
		opts = append(slices.Clone(opts), c.cfg.rankComm(rank)...)
	}
	if c.cfg.reconnect {
		opts = append(slices.Clone(opts), nccl.WithReconnect(c.reconnectFunc(rank)))
	}
	opts = append(slices.Clone(opts), ncclcfg.WithDriver(d))
	b, err := nccl.New(ctx, comm.UniqueID(c.generationID(gen)), rank, c.n, opts...)
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", rank, err)
	}
	return b, nil
}

// generationID returns the unique id of cluster generation gen, made on first use.
func (c *Cluster) generationID(gen int) gpulib.UniqueID {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.ids[gen]
	if !ok {
		id = c.w.NewUniqueID()
		c.ids[gen] = id
	}
	return id
}

// reconnectFunc maps rank's backend generations (counted from its own start) to
// cluster generations.
func (c *Cluster) reconnectFunc(rank int) nccl.ReconnectFunc {
	return func(ctx context.Context, generation int) (comm.UniqueID, error) {
		if err := ctx.Err(); err != nil {
			return comm.UniqueID{}, err
		}
		c.mu.Lock()
		gen := c.base[rank] + generation
		c.mu.Unlock()
		return comm.UniqueID(c.generationID(gen)), nil
	}
}

// Replace brings back a killed rank the way a restarted process would: its old backend
// is closed, its device comes back empty, and a new backend joins the communicator of
// generation gen, the generation the survivors' AttemptReconnect is creating (1 after
// the first failure; needs WithReconnect). Call it while the survivors reconnect: it
// waits for them. The new backend replaces the old one in Backends.
func (c *Cluster) Replace(ctx context.Context, rank, gen int) (*nccl.Backend, error) {
	if err := c.checkRank("replace", rank); err != nil {
		return nil, err
	}
	if !c.cfg.reconnect {
		return nil, fmt.Errorf("replace rank %d: %w: the cluster was made without WithReconnect", rank, comm.ErrUnsupported)
	}
	if gen < 1 {
		return nil, &comm.ArgError{Op: "replace", Arg: "generation", Value: gen, Err: comm.ErrInvalidSize, Reason: "generations count from 1"}
	}
	c.mu.Lock()
	old := c.backends[rank]
	c.mu.Unlock()
	if old != nil {
		_ = old.Close() // a dead rank's teardown fails fast; its errors are expected
	}
	if err := c.w.Revive(rank); err != nil {
		return nil, fmt.Errorf("replace rank %d: %w (kill it first)", rank, err)
	}
	c.mu.Lock()
	c.base[rank] = gen
	c.mu.Unlock()
	b, err := c.start(ctx, rank, gen)
	if err != nil {
		return nil, fmt.Errorf("replace: %w", err)
	}
	c.mu.Lock()
	c.backends[rank] = b
	c.mu.Unlock()
	return b, nil
}

// SplitBackends splits every rank's backend at once (nccl.Backend.Split with key = rank):
// rank r joins sub-group color(r). It returns the new backends, index = rank (nil for a
// negative color); the caller closes them before the Cluster.
func (c *Cluster) SplitBackends(ctx context.Context, color func(rank int) int) ([]comm.Backend, error) {
	c.mu.Lock()
	parents := slices.Clone(c.backends)
	c.mu.Unlock()
	if len(parents) == 0 {
		return nil, fmt.Errorf("split backends: %w: the cluster has no NCCL backends", comm.ErrUnsupported)
	}
	out := make([]comm.Backend, len(parents))
	errs := make([]error, len(parents))
	var wg sync.WaitGroup
	for r, b := range parents {
		if b == nil {
			return nil, fmt.Errorf("split backends: %w: the cluster has no NCCL backends", comm.ErrUnsupported)
		}
		wg.Go(func() {
			nb, err := b.Split(ctx, color(r), r)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
			} else if nb != nil {
				out[r] = nb
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range out {
			if b != nil {
				_ = b.Close()
			}
		}
		return nil, fmt.Errorf("split backends: %w", err)
	}
	return out, nil
}

// Size returns the number of ranks.
func (c *Cluster) Size() int { return c.n }

// Backends returns every rank's backend, index = rank.
func (c *Cluster) Backends() []comm.Backend {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]comm.Backend, len(c.backends))
	for i, b := range c.backends {
		out[i] = b
	}
	return out
}

// Backend returns rank's backend, the same value as Backends()[rank]; NCCL(rank) gives
// the same backend as its concrete type, for the NCCL-only methods (Split, Shrink,
// Communicator, ...).
func (c *Cluster) Backend(rank int) (comm.Backend, error) {
	b, err := c.NCCL(rank)
	if err != nil {
		return nil, err // not a nil *nccl.Backend in a non-nil interface
	}
	return b, nil
}

// NCCL returns rank's backend as the NCCL backend it is (the value Backend(rank)
// returns), for the methods only it has: Split, Shrink, Communicator, AttemptReconnect.
func (c *Cluster) NCCL(rank int) (*nccl.Backend, error) {
	if err := c.checkRank("backend", rank); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rank >= len(c.backends) || c.backends[rank] == nil {
		return nil, fmt.Errorf("backend of rank %d: %w: the cluster has no NCCL backends", rank, comm.ErrUnsupported)
	}
	return c.backends[rank], nil
}

// NCCLs returns every rank's backend as the NCCL backend it is, index = rank: what
// RunRanks hands f then has Split, Shrink and the other NCCL-only methods.
func (c *Cluster) NCCLs() []*nccl.Backend {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.backends)
}

// Communicators returns every rank's typed communicator (the backends' own
// communicators: closing either closes both).
func (c *Cluster) Communicators() []comm.Communicator {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]comm.Communicator, len(c.backends))
	for i, b := range c.backends {
		out[i] = b.Communicator()
	}
	return out
}

func (c *Cluster) checkRank(op string, rank int) error {
	if rank < 0 || rank >= c.n {
		return &comm.ArgError{Op: op, Arg: "rank", Value: rank, Err: comm.ErrInvalidRank,
			Reason: fmt.Sprintf("cluster has %d ranks", c.n)}
	}
	return nil
}

// Close closes every backend (concurrently, as ranks of separate processes would) and
// then the simulation; if a backend's Close has not returned within a minute, the
// simulation is stopped under it. It returns the backends' errors (a killed rank's
// backend reports one), except ErrClosed for backends the caller closed already. Close
// is idempotent.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		backends := slices.Clone(c.backends)
		c.mu.Unlock()
		errs := make([]error, len(backends))
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for r, b := range backends {
				if b != nil {
					wg.Go(func() {
						if err := b.Close(); err != nil && !errors.Is(err, comm.ErrClosed) {
							errs[r] = fmt.Errorf("close rank %d: %w", r, err)
						}
					})
				}
			}
			wg.Wait()
		}()
		t := time.NewTimer(c.cfg.closeWait)
		defer t.Stop()
		select {
		case <-done:
			_ = c.w.Close()
		case <-t.C:
			_ = c.w.Close() // unblocks the backends' driver calls
			<-done
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
