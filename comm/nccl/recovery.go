package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// AttemptReconnect aborts the communicator and initialises the next generation from
// the id that the WithReconnect function returns; every rank must call it at the same
// time. Registrations made with RegisterBuffer end with the old communicator (their
// handles become unknown); symmetric allocations stay allocated and are registered as
// windows again, in allocation order. Without WithReconnect it returns ErrUnsupported.
func (b *Backend) AttemptReconnect(ctx context.Context) error {
	return b.conn().reinit(ctx, func() int {
		b.regMu.Lock()
		defer b.regMu.Unlock()
		for h := range b.regs {
			b.conn().g.Forget(h)
		}
		b.regs = nil
		b.generation++
		return b.generation
	}, b.rewindow)
}

// reinit replaces a failed communicator, holding it exclusively: abort, next (the
// Backend forgets what ended with the old communicator and numbers the generation),
// the WithReconnect function's id, a new initialisation, then after (the Backend's
// windows).
func (c *Communicator) reinit(ctx context.Context, next func() int, after func(context.Context) error) error {
	if err := c.g.OutsideGroup(core.OpAttemptReconnect); err != nil {
		return err
	}
	if c.cfg.Reconnect == nil {
		return &comm.OpError{Op: core.OpAttemptReconnect, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
			Err: fmt.Errorf("%w: no WithReconnect option", comm.ErrUnsupported)}
	}
	ctx, stop := c.untilClose(ctx) // Close does not wait for a rendezvous with dead peers
	defer stop()
	c.interrupt.Store(interruptReconnect)
	c.life.Lock()
	defer c.life.Unlock()
	c.interrupt.Store(interruptNone)
	if c.g.IsClosed() {
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: core.OpAttemptReconnect, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if c.comm != 0 {
		if err := c.d.CommAbort(c.comm); err != nil {
			c.cfg.Log.Error("comm: abort before reconnect", "rank", c.rank, "err", err)
		}
		c.comm = 0
	}
	c.g.DropOps() // the communicator's PreMulSum operators ended with it
	c.fail(fmt.Errorf("%w: reconnect in progress", comm.ErrUnhealthy))
	gen := next()
	id, err := c.cfg.Reconnect(ctx, gen)
	if err != nil {
		return &comm.OpError{Op: core.OpAttemptReconnect, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	comm, err := c.initComm(ctx, id, core.OpAttemptReconnect)
	if err != nil {
		return err
	}
	c.comm = comm
	c.faultMu.Lock()
	c.fault = nil
	c.faulted.Store(false)
	c.faultMu.Unlock()
	if after != nil {
		if err := after(ctx); err != nil {
			return err
		}
	}
	c.cfg.Log.Info("comm: reconnected", "rank", c.rank, "generation", gen)
	return nil
}

// Shrink lets the surviving ranks continue without the ranks in exclude (typically
// dead ones): it stops the work in flight on this communicator (ncclCommRevoke on
// NCCL >= 2.28.7; NCCL_SHRINK_ABORT on 2.27) and creates, with ncclCommShrink, a
// communicator of the remaining ranks. Every remaining rank calls it, at the same time
// and with the same list; the excluded ranks do not. With an NCCL older than 2.27 it
// returns ErrUnsupported saying so.
//
// The new backend numbers the remaining ranks in their old order without gaps: its
// Rank and WorldSize report this rank's new place (ShrunkRank computes it). It keeps
// the element type, the add kernel (SetAddKernel) and the options; on a backend from a
// Job, its AttemptReconnect meets the other survivors under the group name
// "<group>/shrink<generation>". Registrations and symmetric allocations stay with this
// backend, which stays open (and unhealthy) until Close: close it once the new one is
// in use.
func (b *Backend) Shrink(ctx context.Context, exclude []int) (*Backend, error) {
	c := b.conn()
	const op = "shrink"
	if err := c.g.OutsideGroup(op); err != nil {
		return nil, err
	}
	if _, ok := c.d.(gpulib.CommInfo); !ok || c.version < versionShrink {
		return nil, unsupported(op, "ncclCommShrink (and a driver reporting rank and size)", versionShrink, c.version)
	}
	if err := c.checkExclude(op, exclude); err != nil {
		return nil, err
	}
	abort := true
	if c.version >= versionRevoke {
		if err := c.Revoke(); err != nil {
			c.cfg.Log.Warn("comm: revoke before shrink failed; shrinking with NCCL_SHRINK_ABORT", "rank", c.rank, "err", err)
		} else {
			abort = false
		}
	}
	child, err := c.Shrink(ctx, exclude, abort)
	if err != nil {
		return nil, err
	}
	if abort { // NCCL ended this communicator's work: it is done
		c.fail(fmt.Errorf("%w: shrunk with NCCL_SHRINK_ABORT", comm.ErrUnhealthy))
	}
	nb := b.child(child)
	if m := c.cfg.Job.Member; m != nil {
		nm, owns := m.Shrunk(child.rank, child.world)
		child.cfg.Reconnect, child.cfg.Job.Member = nm.Reconnect, nm
		if owns {
			nb.ownJob()
		}
	}
	c.cfg.Log.Info("comm: shrank", "old_rank", c.rank, "old_world", c.world, "rank", child.rank, "world", child.world,
		"excluded", exclude)
	return nb, nil
}

// child makes the Backend over a communicator derived from b's (Shrink, Split): the
// same element type and options, and the add kernel when b had one. It has no
// reconnect function or job membership of its own until the caller gives it one.
func (b *Backend) child(c *Communicator) *Backend {
	c.cfg.Reconnect = nil
	c.cfg.Job.Member = nil
	nb := backendOf(c, b.elem)
	if k := comm.Kernel(b.addKernel.Load()); k != 0 { // every rank had set it: keep the two-rank path
		if err := nb.SetAddKernel(k); err != nil {
			c.cfg.Log.Warn("comm: add kernel not kept", "rank", c.rank, "err", err)
		}
	}
	return nb
}

// ShrunkRank returns the rank that rank has after a Shrink that excluded exclude, or
// -1 when rank is excluded itself: ranks keep their order and close the gaps.
func ShrunkRank(rank int, exclude []int) int {
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	n := rank
	for _, r := range slices.Compact(ex) {
		switch {
		case r == rank:
			return -1
		case r < rank:
			n--
		}
	}
	return n
}

// checkExclude validates Shrink's list: ranks of this communicator, each once, not this
// rank.
func (c *Communicator) checkExclude(op string, exclude []int) error {
	seen := make(map[int]bool, len(exclude))
	for _, r := range exclude {
		if err := core.CheckRank(op, "exclude", r, c.world); err != nil {
			return err
		}
		if seen[r] {
			return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "exclude", Value: r, Err: comm.ErrInvalidRank, Reason: "listed twice"}
		}
		seen[r] = true
	}
	if seen[c.rank] {
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "exclude", Value: c.rank, Err: comm.ErrInvalidRank, Reason: "excludes this rank"}
	}
	return nil
}

// aborted fails when the communicator was aborted (by the watchdog, or by an
// AttemptReconnect that then failed): what needs the failed communicator cannot run.
func (c *Communicator) aborted(op string) error {
	if c.comm != 0 {
		return nil
	}
	return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
		Err: fmt.Errorf("%w: the communicator was aborted; only attempt-reconnect and close remain", comm.ErrUnhealthy)}
}

// Split creates the Backend of a sub-group with ncclCommSplit (NCCL >= 2.18), e.g. a
// tensor-parallel group of a larger world: ranks passing the same color join one
// communicator, ordered by key; a negative color joins none and returns (nil, nil).
// Every rank of this backend calls it, at the same time. The child has its own
// communicator and stream on this rank's device, this backend's element type, add
// kernel (the two-rank path applies when the child has two ranks) and options,
// including the watchdog (a watchdog of its own with the same settings); its
// AttemptReconnect is unsupported (it belongs to no job generation: split the parent
// again after the parent reconnects). Close it before the parent.
//
// Split ends with one all-gather of 8 bytes per member on the child, on every member,
// to learn the members' global ranks (the flight recorder names them): when a member
// does not take part within the operation timeout (WithTimeout) or ctx, or is dead,
// Split fails on every member that sees it, the child is aborted, and its memory is
// freed only once that all-gather's queued work has ended. The parent stays usable
// for Shrink.
func (b *Backend) Split(ctx context.Context, color, key int) (*Backend, error) {
	child, err := b.conn().split(ctx, color, key)
	if child == nil {
		return nil, err
	}
	return b.child(child), nil
}

// Split creates child communicators with ncclCommSplit (NCCL >= 2.18), as
// Backend.Split does (the same arguments, exchange and failures). The child is a
// *Communicator with its own stream and the parent's options. It needs a driver that
// can report the child's rank and size.
func (c *Communicator) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	child, err := c.split(ctx, color, key)
	if child == nil {
		return nil, err
	}
	return child, err
}

func (c *Communicator) split(ctx context.Context, color, key int) (*Communicator, error) {
	if err := c.g.OutsideGroup(core.OpSplit); err != nil {
		return nil, err
	}
	info, ok := c.d.(gpulib.CommInfo)
	if !ok || c.version < versionSplit {
		return nil, unsupported(core.OpSplit, "ncclCommSplit (and a driver reporting rank and size)", versionSplit, c.version)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(core.OpSplit, -1); err != nil {
		return nil, err
	}
	col := color
	if col < 0 {
		col = gpulib.SplitNoColor
	}
	if err := bind(c.d); err != nil {
		return nil, &comm.OpError{Op: core.OpSplit, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	comm, err := c.d.CommSplit(c.comm, col, key, c.ncclConfig())
	c.mu.Unlock()
	if err == nil || code(err) == gpulib.InProgress {
		err = c.settle(ctx, c.comm, bounded)
	}
	if err == nil && comm != 0 {
		err = c.settle(ctx, comm, bounded)
	}
	if err != nil {
		if comm != 0 {
			_ = c.d.CommAbort(comm)
		}
		return nil, &core.OpError{Op: core.OpSplit, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	n := c.splits.Add(1) // on every rank, those without a child too
	if color < 0 || comm == 0 {
		return nil, nil
	}
	rank, err := info.CommUserRank(comm)
	if err == nil {
		var world int
		if world, err = info.CommCount(comm); err == nil {
			child := &Communicator{d: c.d, direct: c.d, ones: c.ones, cfg: c.cfg, global: c.global, version: c.version}
			if c.fr != nil {
				child.rec = c.rec
			}
			if err = child.adopt(comm, rank, world); err != nil {
				return nil, err
			}
			if err = c.splitRecorder(ctx, child, int(n), color); err != nil {
				// Close aborts the failed child and frees its memory only once the
				// exchange's queued work has ended.
				child.fail(err)
				if cerr := child.Close(); cerr != nil {
					c.cfg.Log.Warn("comm: split: close of the failed child", "rank", c.rank, "err", cerr)
				}
				return nil, &core.OpError{Op: core.OpSplit, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
			}
			return child, nil
		}
	}
	_ = c.d.CommAbort(comm)
	return nil, &core.OpError{Op: core.OpSplit, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
}

// Revoke stops every operation in flight on the communicator (ncclCommRevoke, NCCL >=
// 2.28) so that a failed job can Shrink or Close without waiting for them. The
// communicator is unhealthy afterwards.
func (c *Communicator) Revoke() error {
	const op = "revoke"
	if err := c.g.OutsideGroup(op); err != nil {
		return err
	}
	if c.version < versionRevoke {
		return unsupported(op, "ncclCommRevoke", versionRevoke, c.version)
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() {
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return err
	}
	c.mu.Lock()
	err := c.d.CommRevoke(c.comm, 0)
	c.mu.Unlock()
	if err == nil || code(err) == gpulib.InProgress {
		err = c.settle(bg, c.comm, bounded)
	}
	c.fail(fmt.Errorf("%w: revoked", comm.ErrUnhealthy))
	if err != nil {
		return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return nil
}

// Shrink creates a communicator of the ranks not listed in exclude (ncclCommShrink,
// NCCL >= 2.27); every remaining rank calls it with the same list. With abort, NCCL
// first ends the operations in flight on this communicator (NCCL_SHRINK_ABORT), the
// way to continue after a rank died. The child has its own stream and this
// communicator's options; this communicator stays open until Close.
func (c *Communicator) Shrink(ctx context.Context, exclude []int, abort bool) (*Communicator, error) {
	const op = "shrink"
	if err := c.g.OutsideGroup(op); err != nil {
		return nil, err
	}
	info, ok := c.d.(gpulib.CommInfo)
	if !ok || c.version < versionShrink {
		return nil, unsupported(op, "ncclCommShrink (and a driver reporting rank and size)", versionShrink, c.version)
	}
	if err := c.checkExclude(op, exclude); err != nil {
		return nil, err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() {
		return nil, &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return nil, err
	}
	flags := gpulib.ShrinkDefault
	if abort {
		flags = gpulib.ShrinkAbort
	}
	if err := bind(c.d); err != nil {
		return nil, &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	comm, err := c.d.CommShrink(c.comm, exclude, c.ncclConfig(), flags)
	c.mu.Unlock()
	if (err == nil || code(err) == gpulib.InProgress) && comm != 0 {
		err = c.settle(ctx, comm, bounded)
	}
	if err == nil && comm == 0 {
		err = errors.New("driver returned a null communicator")
	}
	var rank, world int
	if err == nil {
		if rank, err = info.CommUserRank(comm); err == nil {
			world, err = info.CommCount(comm)
		}
	}
	if err != nil {
		if comm != 0 {
			_ = c.d.CommAbort(comm)
		}
		return nil, &core.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	child := &Communicator{d: c.d, direct: c.d, ones: c.ones, cfg: c.cfg, global: c.global, version: c.version}
	if err := child.adopt(comm, rank, world); err != nil {
		return nil, err
	}
	c.shrunk(child, exclude)
	return child, nil
}
