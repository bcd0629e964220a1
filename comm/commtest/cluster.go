package commtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest/internal/sim"
	"github.com/ncclgo/ncclgo/comm/internal/seam"
)

// Cluster is a world of ranks running comm's NCCL backend on a simulated machine: one
// simulated device per rank, connected by a simulated NCCL. It is safe for concurrent
// use. Close it to release every goroutine it started.
type Cluster struct {
	w        *sim.World
	n        int
	backends []*comm.NCCL // nil for a memory-only cluster (SingleHarness)
	cfg      clusterConfig

	closeOnce sync.Once
	closeErr  error
}

type clusterConfig struct {
	comm        []comm.Option
	sim         []sim.Option
	initTimeout time.Duration
	closeWait   time.Duration
}

// Option configures a Cluster.
type Option func(*clusterConfig)

// WithCommOptions passes options to every rank's backend (comm.WithElementType,
// comm.WithTimeout, ...).
func WithCommOptions(opts ...comm.Option) Option {
	return func(c *clusterConfig) { c.comm = append(c.comm, opts...) }
}

// WithNCCLVersion sets the NCCL version the simulated library reports (default 22907,
// 2.29.7); functions newer than it are missing, as with a real older library.
func WithNCCLVersion(v int) Option {
	return func(c *clusterConfig) { c.sim = append(c.sim, sim.WithVersion(v)) }
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

// WithInitTimeout bounds NewCluster's wait for every rank's communicator (default 30s).
func WithInitTimeout(d time.Duration) Option {
	return func(c *clusterConfig) { c.initTimeout = d }
}

// NewCluster starts n ranks of comm's NCCL backend, each on its own simulated device,
// sharing one communicator.
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
	if seam.NewNCCL == nil {
		return nil, errors.New("new cluster: package comm did not register its NCCL backend")
	}
	w, err := sim.New(n, cfg.sim...)
	if err != nil {
		return nil, fmt.Errorf("new cluster: %w", err)
	}
	c := &Cluster{w: w, n: n, backends: make([]*comm.NCCL, n), cfg: cfg}
	d0, _ := w.Driver(0)
	id, err := d0.GetUniqueID()
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("new cluster: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.initTimeout)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			d, _ := w.Driver(r)
			b, err := seam.NewNCCL(ctx, d, id, r, n, cfg.comm)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				return
			}
			nb, ok := b.(*comm.NCCL)
			if !ok {
				errs[r] = fmt.Errorf("rank %d: backend of type %T, want *comm.NCCL", r, b)
				return
			}
			c.backends[r] = nb
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("new cluster of %d ranks: %w", n, err)
	}
	return c, nil
}

// Size returns the number of ranks.
func (c *Cluster) Size() int { return c.n }

// Backends returns every rank's backend, index = rank.
func (c *Cluster) Backends() []comm.Backend {
	out := make([]comm.Backend, len(c.backends))
	for i, b := range c.backends {
		out[i] = b
	}
	return out
}

// Backend returns rank's backend.
func (c *Cluster) Backend(rank int) (*comm.NCCL, error) {
	if err := c.checkRank("backend", rank); err != nil {
		return nil, err
	}
	if c.backends[rank] == nil {
		return nil, fmt.Errorf("backend of rank %d: %w: the cluster has no NCCL backends", rank, comm.ErrUnsupported)
	}
	return c.backends[rank], nil
}

// Communicators returns every rank's typed communicator (the backends' own
// communicators: closing either closes both).
func (c *Cluster) Communicators() []comm.Communicator {
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
		errs := make([]error, len(c.backends))
		done := make(chan struct{})
		go func() {
			defer close(done)
			var wg sync.WaitGroup
			for r, b := range c.backends {
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
