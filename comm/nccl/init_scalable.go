package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// versionScalable is the first NCCL with ncclCommInitRankScalable.
const versionScalable = 22304

// opInitScalable names NewScalable in errors.
const opInitScalable = "init-scalable"

// initRank makes the NCCL call of initComm: ncclCommInitRankScalable for NewScalable's
// first initialisation, ncclCommInitRankConfig otherwise (AttemptReconnect's too).
func (c *Communicator) initRank(id comm.UniqueID, op string) (gpulib.Comm, error) {
	if op == core.OpInit && len(c.cfg.InitIDs) > 0 {
		ids := make([]gpulib.UniqueID, len(c.cfg.InitIDs))
		for i, id := range c.cfg.InitIDs {
			ids[i] = gpulib.UniqueID(id)
		}
		return c.d.(gpulib.ScalableInit).CommInitRankScalable(c.world, ids, c.rank, c.ncclConfig())
	}
	return c.d.CommInitRank(c.world, gpulib.UniqueID(id), c.rank, c.ncclConfig())
}

// NewScalable is New from several unique ids (ncclCommInitRankScalable, NCCL >=
// 2.23.4): at large scale NCCL spreads the bootstrap over the ids' roots instead of
// one. Every rank passes the same ids in the same order, from 1 to world of them, each
// made with NewUniqueID (typically by the ranks world/len(ids) apart, and shared). It
// takes New's options; AttemptReconnect then initialises from WithReconnect's one id.
// With an older NCCL it returns ErrUnsupported naming the version needed.
func NewScalable(ctx context.Context, ids []comm.UniqueID, rank, world int, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if err := core.CheckWorld(opInitScalable, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	if len(ids) < 1 || len(ids) > world {
		return nil, &comm.ArgError{Op: opInitScalable, Arg: "unique ids", Value: len(ids), Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("need from 1 to world size (%d) ids", world)}
	}
	for i, id := range ids {
		if id == (comm.UniqueID{}) {
			return nil, &comm.ArgError{Op: opInitScalable, Arg: fmt.Sprintf("unique ids[%d]", i), Value: "zero", Err: comm.ErrInvalidSize,
				Reason: "a zero id was never made by NewUniqueID"}
		}
	}
	d, err := ncclcfg.DriverFor(cfg, cfg.Device, rank)
	if err != nil {
		return nil, &comm.OpError{Op: opInitScalable, Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	return newScalable(ctx, d, ids, rank, world, cfg)
}

func newScalable(ctx context.Context, d gpulib.Driver, ids []comm.UniqueID, rank, world int, cfg ncclcfg.Config) (*Backend, error) {
	version, err := d.Version()
	if err != nil {
		return nil, &comm.OpError{Op: "get-version", Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	if _, ok := d.(gpulib.ScalableInit); !ok || version < versionScalable {
		return nil, unsupported(opInitScalable, "ncclCommInitRankScalable (and a driver offering it)", versionScalable, version)
	}
	cfg.InitIDs = ids
	b, err := newNCCL(ctx, d, ids[0], rank, world, cfg)
	if b != nil {
		b.c.cfg.InitIDs = nil // children and reconnects use one id
	}
	return b, err
}

// NewAll creates the Backends of a communicator of len(devices) ranks in this process,
// rank r on GPU devices[r] (what ncclCommInitAll does, as Go: one unique id and every
// rank initialised at once), for a process that drives several GPUs. It takes New's
// options but WithDevice; a device listed twice is an error. On failure it closes the
// backends it made. Each backend is used like one from New: a rank's blocking
// collectives wait, so issue the ranks' operations from separate goroutines or in one
// Group.
func NewAll(ctx context.Context, devices []int, opts ...Option) ([]*Backend, error) {
	cfg := newConfig(opts)
	if len(devices) == 0 {
		return nil, &comm.ArgError{Op: core.OpInit, Arg: "devices", Value: 0, Err: comm.ErrInvalidSize, Reason: "need at least one device"}
	}
	seen := map[int]int{}
	for r, dev := range devices {
		if dev < 0 {
			return nil, &comm.ArgError{Op: core.OpInit, Arg: fmt.Sprintf("devices[%d]", r), Value: dev, Err: comm.ErrInvalidRank, Reason: "negative device ordinal"}
		}
		if first, ok := seen[dev]; ok {
			return nil, &comm.ArgError{Op: core.OpInit, Arg: fmt.Sprintf("devices[%d]", r), Value: dev, Err: comm.ErrInvalidRank,
				Reason: fmt.Sprintf("device listed twice (also rank %d)", first)}
		}
		seen[dev] = r
	}
	if err := core.CheckWorld(core.OpInit, 0, len(devices), cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	drivers := make([]gpulib.Driver, len(devices))
	for r, dev := range devices {
		d, err := ncclcfg.DriverFor(cfg, dev, r)
		if err != nil {
			return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: r, GlobalRank: r, Err: fmt.Errorf("open device %d: %w", dev, err)}
		}
		drivers[r] = d
	}
	return newAll(ctx, drivers, cfg)
}

// newAll initialises one rank on each driver, together.
func newAll(ctx context.Context, drivers []gpulib.Driver, cfg ncclcfg.Config) ([]*Backend, error) {
	id, err := drivers[0].GetUniqueID()
	if err != nil {
		return nil, &comm.OpError{Op: "get-unique-id", Bytes: -1, Rank: 0, GlobalRank: 0, Err: err}
	}
	bs := make([]*Backend, len(drivers))
	errs := make([]error, len(drivers))
	var wg sync.WaitGroup
	for r, d := range drivers {
		wg.Go(func() { bs[r], errs[r] = newNCCL(ctx, d, comm.UniqueID(id), r, len(drivers), cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
		return nil, err
	}
	return bs, nil
}
