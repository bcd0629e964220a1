package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// versionGrow is the first NCCL with ncclCommGrow and ncclCommGetUniqueId.
const versionGrow = 22902

// opGrow names Grow, GrowID and Join in errors.
const opGrow = "grow"

// GrowID returns the unique id of this communicator's next Grow (ncclCommGetUniqueId,
// NCCL >= 2.29.2). One existing rank, the root, calls it and passes it to its own Grow
// and to the newcomers' Join; NCCL hands it to the other existing ranks itself. A
// second GrowID before every rank has made the Grow that uses the first fails: an id
// serves one Grow. With an older NCCL it returns ErrUnsupported naming the version
// needed.
func (c *Communicator) GrowID() (comm.UniqueID, error) {
	if err := c.g.OutsideGroup(opGrow); err != nil {
		return comm.UniqueID{}, err
	}
	e, err := c.elastic(opGrow, "ncclCommGrow", versionGrow)
	if err != nil {
		return comm.UniqueID{}, err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opGrow, -1); err != nil {
		return comm.UniqueID{}, err
	}
	if err := c.aborted(opGrow); err != nil {
		return comm.UniqueID{}, err
	}
	if err := bind(c.d); err != nil {
		return comm.UniqueID{}, &comm.OpError{Op: opGrow, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	id, err := e.CommGetUniqueID(c.comm)
	c.mu.Unlock()
	if err != nil {
		return comm.UniqueID{}, &comm.OpError{Op: opGrow, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return comm.UniqueID(id), nil
}

// Grow creates, with ncclCommGrow (NCCL >= 2.29.2), a communicator of world ranks: this
// communicator's ranks, which keep their ranks, and world-WorldSize newcomers, which
// take the ranks from WorldSize on with Join. Every rank of this communicator calls
// it at the same time: the root (the rank that called GrowID) with the id, the others
// with id nil. The child has its own stream and this communicator's options; this
// communicator stays open and usable until Close. With an older NCCL it returns
// ErrUnsupported naming the version needed.
func (c *Communicator) Grow(ctx context.Context, world int, id *comm.UniqueID) (*Communicator, error) {
	if err := c.g.OutsideGroup(opGrow); err != nil {
		return nil, err
	}
	e, err := c.elastic(opGrow, "ncclCommGrow", versionGrow)
	if err != nil {
		return nil, err
	}
	if world <= c.world {
		return nil, &comm.ArgError{Op: opGrow, Arg: "world size", Value: world, Err: comm.ErrInvalidSize,
			Reason: fmt.Sprintf("must be more than the %d ranks of the communicator", c.world)}
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opGrow, -1); err != nil {
		return nil, err
	}
	if err := c.aborted(opGrow); err != nil {
		return nil, err
	}
	var uid *gpulib.UniqueID
	if id != nil {
		uid = (*gpulib.UniqueID)(id)
	}
	if err := bind(c.d); err != nil {
		return nil, &comm.OpError{Op: opGrow, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	h, err := e.CommGrow(c.comm, world, uid, -1, c.ncclConfig())
	c.mu.Unlock()
	child := &Communicator{d: c.d, direct: c.d, ones: c.ones, cfg: c.cfg, global: c.global, version: c.version}
	if err := child.grown(ctx, h, err, c.rank, world); err != nil {
		return nil, err
	}
	c.cfg.Log.Info("comm: grew", "rank", c.rank, "old_world", c.world, "world", world)
	return child, nil
}

// grown settles the communicator h that ncclCommGrow returned (with err) and makes it
// c's, as rank of world. On failure it aborts h.
func (c *Communicator) grown(ctx context.Context, h gpulib.Comm, err error, rank, world int) error {
	if (err == nil || code(err) == gpulib.InProgress) && h != 0 {
		err = c.settle(ctx, h, bounded)
	}
	if err == nil && h == 0 {
		err = errors.New("driver returned a null communicator")
	}
	if err != nil {
		if h != 0 {
			_ = c.d.CommAbort(h)
		}
		return &core.OpError{Op: opGrow, Bytes: -1, Rank: rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return c.adopt(h, rank, world)
}

// Grow makes the Backend of a communicator grown to world ranks (see
// Communicator.Grow): every rank of b calls it, the root with GrowID's id, the others
// with nil, while the newcomers call Join. On a backend from a Job (comm/job) every
// rank may pass nil: rank 0 is then the root, and publishes the id in the job's store
// for the newcomers, which come with Job.JoinGrow; the new backend's AttemptReconnect
// meets the grown communicator's ranks under the group "<group>/grow<generation>";
// outside a job it is unsupported, as after Shrink. The new backend keeps b's element
// type, add kernel and options; b stays open and usable until Close.
func (b *Backend) Grow(ctx context.Context, world int, id *comm.UniqueID) (*Backend, error) {
	c := b.conn()
	g, _ := c.cfg.Job.Member.(ncclcfg.Grower)
	if id == nil && g != nil && c.rank == 0 && world > c.world {
		root, err := c.GrowID()
		if err != nil {
			return nil, err
		}
		if err := g.OfferGrow(ctx, root, c.world, world); err != nil {
			return nil, &comm.OpError{Op: opGrow, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
		id = &root
	}
	child, err := c.Grow(ctx, world, id)
	if err != nil {
		return nil, err
	}
	nb := b.child(child)
	if g != nil {
		nm, owns := g.Grown(child.rank, child.world)
		child.cfg.Reconnect, child.cfg.Job.Member = nm.Reconnect, nm
		if owns {
			nb.ownJob()
		}
	}
	return nb, nil
}

// GrowID returns the unique id of the next Grow; see Communicator.GrowID.
func (b *Backend) GrowID() (comm.UniqueID, error) { return b.conn().GrowID() }

// Join creates a newcomer's Backend in a communicator that its existing ranks Grow to
// world ranks (ncclCommGrow, NCCL >= 2.29.2): id is the root's GrowID, rank this
// process's rank in the grown communicator (the existing ranks keep theirs, 0 to their
// old size minus one, so newcomers take the ranks above). It waits, as New does, for
// the other ranks within ctx and the operation timeout, and takes New's options. With
// an older NCCL it returns ErrUnsupported naming the version needed.
func Join(ctx context.Context, id comm.UniqueID, rank, world int, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if err := core.CheckWorld(opGrow, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	if err := checkTwoRankThreshold(rank, cfg.TwoRankMax); err != nil {
		return nil, err
	}
	d, err := ncclcfg.DriverFor(cfg, cfg.Device, rank)
	if err != nil {
		return nil, &comm.OpError{Op: opGrow, Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	return join(ctx, d, id, rank, world, cfg)
}

// join is Join on driver d.
func join(ctx context.Context, d gpulib.Driver, id comm.UniqueID, rank, world int, cfg ncclcfg.Config) (*Backend, error) {
	if d == nil {
		return nil, errors.New("grow: driver is nil")
	}
	version, err := d.Version()
	if err != nil {
		return nil, &comm.OpError{Op: "get-version", Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	if err := checkConfig(cfg.Nccl, version); err != nil {
		return nil, err
	}
	c := &Communicator{d: d, direct: d, ones: oneSidedOf(d), cfg: cfg, rank: rank, global: rank, world: world, version: version}
	e, err := c.elastic(opGrow, "ncclCommGrow", versionGrow)
	if err != nil {
		return nil, err
	}
	if err := bind(d); err != nil {
		return nil, &comm.OpError{Op: opGrow, Bytes: -1, Rank: rank, GlobalRank: rank, Name: cfg.Name, Err: err}
	}
	uid := gpulib.UniqueID(id)
	h, err := e.CommGrow(0, world, &uid, rank, c.ncclConfig())
	err = c.grown(ctx, h, err, rank, world)
	runtime.UnlockOSThread()
	if err != nil {
		return nil, err
	}
	c.startRecorder()
	b := backendOf(c, cfg.Elem)
	if cfg.Job.Owns {
		b.ownJob()
	}
	c.cfg.Log.Info("comm: joined", "rank", rank, "world", world)
	return b, nil
}
