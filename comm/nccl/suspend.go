package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// versionSuspend is the first NCCL with ncclCommSuspend, ncclCommResume and
// ncclCommMemStats.
const versionSuspend = 22907

// ErrSuspended is the error of an operation on a suspended communicator (Suspend
// without Resume): it fails at once, before reaching NCCL.
var ErrSuspended = errors.New("communicator suspended")

// MemStats is what NCCL reports of the GPU memory it holds for one rank of a
// communicator (ncclCommMemStats). As in NCCL, the byte counts are the memory NCCL
// tracks for the communicator whether suspended or not: Suspended says whether the
// Suspendable part is released.
type MemStats struct {
	// Suspendable is the memory a Suspend releases (ncclStatGpuMemSuspend), in bytes.
	Suspendable uint64
	// Persistent is the memory NCCL keeps while suspended (ncclStatGpuMemPersist).
	Persistent uint64
	// Total is all the memory NCCL tracks for the communicator (ncclStatGpuMemTotal).
	Total uint64
	// Suspended is true while the Suspendable memory is released
	// (ncclStatGpuMemSuspended).
	Suspended bool
}

// elastic returns the driver's elastic capability, or the unsupported error of op.
func (c *Communicator) elastic(op, call string, since int) (gpulib.Elastic, error) {
	e, ok := c.d.(gpulib.Elastic)
	if !ok || c.version < since {
		return nil, unsupported(op, call+" (and a driver offering it)", since, c.version)
	}
	return e, nil
}

// suspendedErr is the error of op on a suspended communicator, nil otherwise.
func (c *Communicator) suspendedErr(op string, bytes int) error {
	if !c.suspended.Load() {
		return nil
	}
	return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
		Err: fmt.Errorf("%w: call Resume first", ErrSuspended)}
}

// Suspend releases the GPU memory NCCL can give back while the communicator is idle
// (ncclCommSuspend with NCCL_SUSPEND_MEM, NCCL >= 2.29.7), e.g. while the GPU serves
// rollouts in a reinforcement-learning loop. Every rank calls it (NCCL meets the other
// ranks in it), outside a group, once its own work on the communicator is done. Until
// Resume every operation fails at once with ErrSuspended; Close is allowed. With an
// older NCCL it returns ErrUnsupported naming the version needed.
func (c *Communicator) Suspend(ctx context.Context) error {
	const op = "suspend"
	if err := c.g.OutsideGroup(op); err != nil {
		return err
	}
	e, err := c.elastic(op, "ncclCommSuspend", versionSuspend)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(op, -1); err != nil {
		return err
	}
	if err := c.aborted(op); err != nil {
		return err
	}
	if !c.suspended.CompareAndSwap(false, true) { // operations from now on fail at once
		return c.suspendedErr(op, -1)
	}
	err = c.memCall(ctx, op, func() error { return e.CommSuspend(c.comm, gpulib.SuspendMem) })
	if err != nil {
		c.suspended.Store(false)
		return err
	}
	c.cfg.Log.Info("comm: suspended", "rank", c.rank)
	return nil
}

// Resume gives the communicator back the memory Suspend released (ncclCommResume);
// every rank calls it, after which operations run again. Without a Suspend before it,
// it returns an error saying the communicator is not suspended.
func (c *Communicator) Resume(ctx context.Context) error {
	const op = "resume"
	if err := c.g.OutsideGroup(op); err != nil {
		return err
	}
	e, err := c.elastic(op, "ncclCommResume", versionSuspend)
	if err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() {
		return &comm.ArgError{Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return err
	}
	if !c.suspended.Load() {
		return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
			Err: errors.New("communicator not suspended")}
	}
	if err := c.memCall(ctx, op, func() error { return e.CommResume(c.comm) }); err != nil {
		return err
	}
	c.suspended.Store(false)
	c.cfg.Log.Info("comm: resumed", "rank", c.rank)
	return nil
}

// memCall makes the driver call f on the communicator's device and waits, within ctx
// and the operation timeout, until the communicator leaves ncclInProgress.
func (c *Communicator) memCall(ctx context.Context, op string, f func() error) error {
	if err := bind(c.d); err != nil {
		return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	c.mu.Lock()
	err := f()
	c.mu.Unlock()
	if err == nil || code(err) == gpulib.InProgress {
		err = c.settle(ctx, c.comm, bounded)
	}
	if err != nil {
		return &core.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return nil
}

// MemStats returns the GPU memory NCCL holds for this rank of the communicator
// (ncclCommMemStats, NCCL >= 2.29.7); it also answers while suspended. With an older
// NCCL it returns ErrUnsupported naming the version needed.
func (c *Communicator) MemStats() (MemStats, error) {
	const op = "mem-stats"
	e, err := c.elastic(op, "ncclCommMemStats", versionSuspend)
	if err != nil {
		return MemStats{}, err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() {
		return MemStats{}, &comm.ArgError{Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed}
	}
	if err := c.aborted(op); err != nil {
		return MemStats{}, err
	}
	var s MemStats
	var suspended uint64
	for _, q := range []struct {
		stat int
		v    *uint64
	}{
		{gpulib.StatMemSuspendable, &s.Suspendable},
		{gpulib.StatMemPersistent, &s.Persistent},
		{gpulib.StatMemTotal, &s.Total},
		{gpulib.StatMemSuspended, &suspended},
	} {
		c.mu.Lock()
		v, err := e.CommMemStats(c.comm, q.stat)
		c.mu.Unlock()
		if err != nil {
			return MemStats{}, &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
		*q.v = v
	}
	s.Suspended = suspended != 0
	return s, nil
}

// Suspend releases NCCL's GPU memory until Resume; see Communicator.Suspend.
func (b *Backend) Suspend(ctx context.Context) error { return b.conn().Suspend(ctx) }

// Resume ends a Suspend; see Communicator.Resume.
func (b *Backend) Resume(ctx context.Context) error { return b.conn().Resume(ctx) }

// MemStats returns NCCL's memory statistics; see Communicator.MemStats.
func (b *Backend) MemStats() (MemStats, error) { return b.conn().MemStats() }
