package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// initComm creates the NCCL communicator (op: init, or attempt-reconnect) and waits, within ctx and the operation
// timeout, until it leaves ncclInProgress. On failure it aborts what it created.
func (c *Communicator) initComm(ctx context.Context, id comm.UniqueID, op string) (gpulib.Comm, error) {
	if err := bind(c.d); err != nil {
		return 0, &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	comm, err := c.initRank(id, op)
	if err == nil || code(err) == gpulib.InProgress {
		if comm == 0 {
			err = errors.New("driver returned a null communicator")
		} else {
			err = c.settle(ctx, comm, bounded)
		}
	}
	if err != nil {
		if comm != 0 {
			if aerr := c.d.CommAbort(comm); aerr != nil {
				c.cfg.Log.Error("comm: abort after failed init", "rank", c.rank, "err", aerr)
			}
		}
		return 0, &core.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return comm, nil
}

// adopt makes comm (already initialised) c's communicator and creates the stream,
// events and scratch buffer. On failure it releases them and aborts comm.
func (c *Communicator) adopt(comm gpulib.Comm, rank, world int) (err error) {
	c.comm, c.rank, c.world = comm, rank, world
	c.g = core.NewGuard(rank, world, c.cfg.Elem)
	c.g.UseScope(&groups.open, outsideGroup)
	if err := bind(c.d); err != nil {
		_ = c.d.CommAbort(comm)
		return &core.OpError{Op: core.OpInit, Bytes: -1, Rank: rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	defer runtime.UnlockOSThread()
	defer func() {
		if err != nil {
			c.releaseLocal(context.Background(), true) // nothing was queued yet
			if aerr := c.d.CommAbort(comm); aerr != nil {
				c.cfg.Log.Error("comm: abort after failed init", "rank", rank, "err", aerr)
			}
			err = &core.OpError{Op: core.OpInit, Bytes: -1, Rank: rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
	}()
	if c.stream, err = c.d.StreamCreate(); err != nil {
		return err
	}
	for _, ev := range c.events() {
		if *ev, err = c.d.EventCreate(); err != nil {
			return err
		}
	}
	if c.scratch, err = c.d.MemAlloc(c.scratchBytes()); err != nil {
		return err
	}
	c.wd = startWatchdog(c)
	return nil
}

// events are the communicator's own events.
func (c *Communicator) events() [4]*gpulib.Event {
	return [...]*gpulib.Event{&c.evIn, &c.evOut, &c.evCmd, &c.evAhead}
}

// releaseLocal frees the stream, events and scratch buffer; the caller holds the
// device bound and has ended (or aborted) the communicator; idle says the stream's
// work is known to have completed (a graceful teardown drained it). Otherwise the
// scratch buffer is freed only once the stream's queued work has completed (an
// aborted communicator's operations end at once): while work that reads or writes it
// is still queued when ctx ends, it stays allocated, and the error says so. Errors
// are logged and returned.
func (c *Communicator) releaseLocal(ctx context.Context, idle bool) error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			c.cfg.Log.Error("comm: teardown", "rank", c.rank, "step", what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if c.scratch != 0 {
		if !idle && c.stream != 0 && !c.streamIdle(ctx) {
			note("free scratch", fmt.Errorf("work still queued on the stream after %v: the scratch buffer (%d bytes) stays allocated", c.cfg.CloseWait, c.scratchBytes()))
		} else {
			note("free scratch", c.d.MemFree(c.scratch))
		}
		c.scratch = 0
	}
	for _, ev := range c.events() {
		if *ev != 0 {
			note("destroy event", c.d.EventDestroy(*ev))
			*ev = 0
		}
	}
	if c.stream != 0 {
		note("destroy stream", c.d.StreamDestroy(c.stream))
		c.stream = 0
	}
	return errors.Join(errs...)
}

// streamIdle reports whether the work queued on the stream has completed (or can
// never run: the stream or device failed), waiting for it until ctx ends.
func (c *Communicator) streamIdle(ctx context.Context) bool {
	for i := 0; ; i++ {
		done, err := c.d.StreamQuery(c.stream)
		if done || err != nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		core.Pause(i, c.cfg.Poll)
	}
}

// fail records the first fatal error the communicator saw (it is unhealthy from then
// on) and returns err, made to match ErrUnhealthy too. It returns once the first
// failure's flight-recorder dump is written (or dumpWait has passed), whichever
// goroutine saw the failure first.
func (c *Communicator) fail(err error) error {
	c.faultMu.Lock()
	first := c.fault == nil
	if first {
		c.fault = err
		c.faulted.Store(true)
		c.dumped = make(chan struct{})
	}
	dumped := c.dumped
	c.faultMu.Unlock()
	if first {
		c.cfg.Log.Warn("comm: communicator failed", "rank", c.rank, "err", err)
		c.dump("failure")
		close(dumped)
	} else {
		// Bounded even if the first goroutine is stuck before its dump (a log handler
		// that calls back into the communicator).
		select {
		case <-dumped:
		case <-time.After(2 * dumpWait):
		}
	}
	if errors.Is(err, comm.ErrUnhealthy) {
		return err
	}
	return fmt.Errorf("%w: %w", comm.ErrUnhealthy, err)
}

func (c *Communicator) faultErr() error {
	if !c.faulted.Load() {
		return nil
	}
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	return c.fault
}

// Close tears the communicator down (see the type's documentation). A group that this
// communicator opened and that is still open is reported with ErrGroupOpen: on the
// calling goroutine's thread Close ends it first (NCCL's group state stays balanced);
// a group open on another goroutine keeps the teardown from being graceful. When Close
// has to abort a communicator that had not failed (work still in flight, such as an
// unmatched send, did not complete within WithCloseTimeout), it says so in its error:
// what was abandoned and why. A second Close returns ErrClosed.
func (c *Communicator) Close() error {
	if _, err := c.g.Close(); err != nil {
		return err
	}
	c.interrupt.Store(interruptClose) // a reconnect holding the communicator gives up
	c.cancelOnClose()
	c.wd.shutdown()
	err := c.shutdown(c.onClose)
	if c.faulted.Load() || err != nil {
		c.dump("close after a failure")
	}
	if c.ownsRec {
		c.rec.Close()
	}
	return err
}

// shutdown interrupts waiting operations, takes the communicator exclusively and tears
// it down; before runs first (the Backend's deregistrations), on the bound thread.
func (c *Communicator) shutdown(before func(ctx context.Context, note func(string, error))) error {
	here, elsewhere := groupsOpenedBy(c)
	for range here { // end the group as GroupEnd would: its recorded calls are launched
		if ended, ok := popGroup(); ok {
			if ended != nil {
				if _, err := ended.submit(); err != nil {
					c.cfg.Log.Error("comm: close", "rank", c.rank, "step", "group-end", "err", err)
				}
				recycle(ended)
			}
			runtime.UnlockOSThread()
		}
	}
	openGroups := here + elsewhere
	c.interrupt.Store(interruptClose)
	c.life.Lock()
	defer c.life.Unlock()
	c.interrupt.Store(interruptNone)

	var errs []error
	note := func(what string, err error) {
		if err != nil {
			c.cfg.Log.Error("comm: close", "rank", c.rank, "step", what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseWait)
	defer cancel()
	if err := bind(c.d); err != nil {
		note("set device", err)
	} else {
		defer runtime.UnlockOSThread()
	}
	graceful := openGroups == 0 && c.faultErr() == nil
	if graceful {
		if err := c.drain(ctx, unbounded); err != nil {
			note("wait for pending work", err)
			graceful = false
		}
	}
	if before != nil {
		before(ctx, note)
	}
	c.endComm(ctx, graceful, note)
	if err := c.releaseLocal(ctx, graceful); err != nil { // graceful: drained, and nothing queued since
		errs = append(errs, err)
	}
	var err error
	if len(errs) > 0 {
		err = &comm.OpError{Op: core.OpClose, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: errors.Join(errs...)}
	}
	if openGroups > 0 {
		return errors.Join(core.GroupLeftOpen(openGroups), err)
	}
	return err
}

// endComm finalizes and destroys the communicator within ctx, or aborts it.
func (c *Communicator) endComm(ctx context.Context, graceful bool, note func(string, error)) {
	if c.comm == 0 {
		return
	}
	defer func() { c.comm = 0 }()
	if graceful {
		err := c.d.CommFinalize(c.comm)
		if err == nil || code(err) == gpulib.InProgress {
			err = c.settle(ctx, c.comm, unbounded)
		}
		if err == nil {
			note("destroy", c.d.CommDestroy(c.comm))
			return
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("operations still in flight (an unmatched send or receive, or a peer that never joined a collective) did not complete within the close timeout %v and were abandoned: %w", c.cfg.CloseWait, err)
		}
		note("finalize, then aborted", err) // Close had to abandon work: say so
	}
	note("abort", c.d.CommAbort(c.comm))
}

// closing returns a context that is canceled when Close starts.
func (c *Communicator) closing() context.Context {
	c.closeOnce.Do(func() { c.closeCtx, c.closeCancel = context.WithCancel(context.Background()) })
	return c.closeCtx
}

// cancelOnClose cancels the contexts of untilClose; Close calls it first.
func (c *Communicator) cancelOnClose() {
	c.closing()
	c.closeCancel()
}

// untilClose returns ctx, also canceled when Close starts, so that a wait for other
// processes (AttemptReconnect's rendezvous) never holds Close up.
func (c *Communicator) untilClose(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.closing(), cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
