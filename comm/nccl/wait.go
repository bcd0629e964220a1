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

// bind locks the calling goroutine to its OS thread and makes the rank's device current
// there, for the calls that depend on the current CUDA context. The caller must call
// runtime.UnlockOSThread when bind succeeded.
func bind(d gpulib.Driver) error {
	runtime.LockOSThread()
	if err := d.SetDevice(); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	return nil
}

// code returns the NCCL result carried by err, or Success when err carries none.
func code(err error) gpulib.Result {
	if err == nil { // no error: one test, no call
		return gpulib.Success
	}
	return codeOf(err)
}

// codeOf is code for a non-nil error.
func codeOf(err error) gpulib.Result {
	var se *gpulib.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return gpulib.Success
}

// Interruptions of waiting operations.
const (
	interruptNone int32 = iota
	interruptClose
	interruptReconnect
	interruptAbort // the watchdog aborts the failed communicator
)

// waitMode says what bounds a wait besides the caller's context.
type waitMode int

const (
	bounded   waitMode = iota // the operation timeout applies
	unbounded                 // only ctx and errors end the wait
)

// wait wraps a wait's error with the operation.
func (c *Communicator) wait(ctx context.Context, op string, bytes int, m waitMode) error {
	if err := c.drain(ctx, m); err != nil {
		return c.opErr(op, bytes, err)
	}
	return nil
}

// opErr is the *OpError of op on this rank.
func (c *Communicator) opErr(op string, bytes int, err error) error {
	return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
}

// waitShared is wait for operations that hold nothing yet: it takes the communicator
// shared and checks that it is usable first.
func (c *Communicator) waitShared(ctx context.Context, op string, bytes int, m waitMode) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(op, bytes); err != nil {
		return err
	}
	return c.wait(ctx, op, bytes, m)
}

// deadline returns the operation-timeout deadline of a wait, zero for none.
func (c *Communicator) deadline(m waitMode) time.Time {
	if m == bounded && c.cfg.Timeout > 0 {
		return time.Now().Add(c.cfg.Timeout)
	}
	return time.Time{}
}

// poll is one step shared by every wait: the communicator's asynchronous state, the
// interruption by Close or AttemptReconnect, ctx, and the deadline.
func (c *Communicator) poll(ctx context.Context, comm gpulib.Comm, deadline time.Time) (gpulib.Result, error) {
	res, err := c.pollState(comm)
	if err != nil {
		return res, err
	}
	return res, c.expired(ctx, deadline)
}

// pollState is poll without ctx and the deadline.
func (c *Communicator) pollState(comm gpulib.Comm) (gpulib.Result, error) {
	res, err := c.d.CommGetAsyncError(comm)
	if err != nil {
		return res, err
	}
	if res != gpulib.Success && res != gpulib.InProgress {
		return res, c.fail(c.asyncErr(comm, res))
	}
	switch c.interrupt.Load() {
	case interruptClose:
		return res, core.ErrClosed
	case interruptReconnect:
		return res, fmt.Errorf("%w: interrupted by attempt-reconnect", core.ErrUnhealthy)
	case interruptAbort:
		return res, fmt.Errorf("%w: the watchdog is aborting the communicator", core.ErrUnhealthy)
	}
	return res, nil
}

// expired is the end of a wait that is not complete: ctx's error, or the timeout once
// the deadline has passed.
func (c *Communicator) expired(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !deadline.IsZero() && time.Now().After(deadline) {
		return c.fail(fmt.Errorf("%w: not completed within %v", comm.ErrTimeout, c.cfg.Timeout))
	}
	return nil
}

// settle waits until comm leaves ncclInProgress (non-blocking init, split, and any call
// that returned ncclInProgress).
func (c *Communicator) settle(ctx context.Context, comm gpulib.Comm, m waitMode) error {
	deadline := c.deadline(m)
	for i := 0; ; i++ {
		res, err := c.pollState(comm)
		if err != nil {
			return err
		}
		if res == gpulib.Success { // complete, however late this poll came
			return nil
		}
		if err := c.expired(ctx, deadline); err != nil {
			return err
		}
		core.Pause(i, c.cfg.Poll)
	}
}

// settleHeld is settle for a caller that holds mu: the flight recorder's ring is lent
// for the wait (flightrec.Comm.Lend), so that a dump, which a hang in this wait is the
// reason for, does not wait for it.
func (c *Communicator) settleHeld(ctx context.Context, comm gpulib.Comm, m waitMode) error {
	c.fr.Lend()
	defer c.fr.Reclaim()
	return c.settle(ctx, comm, m)
}

// drain waits until the work queued on the communication stream has completed.
func (c *Communicator) drain(ctx context.Context, m waitMode) error {
	return c.drainOn(ctx, c.stream, m)
}

// drainOn waits until the work queued on stream s has completed.
func (c *Communicator) drainOn(ctx context.Context, s gpulib.Stream, m waitMode) error {
	done, err := c.d.StreamQuery(s)
	return c.drained(ctx, s, m, done, err)
}

// drained is drainOn after its first query of s answered done, err.
func (c *Communicator) drained(ctx context.Context, s gpulib.Stream, m waitMode, done bool, err error) error {
	var deadline time.Time
	for i := 0; ; i++ {
		if i > 0 {
			done, err = c.d.StreamQuery(s)
		}
		if err != nil {
			return c.fail(err)
		}
		if done { // asyncError, with its success path here: one call fewer
			res, err := c.d.CommGetAsyncError(c.comm)
			if asyncOK(res, err) {
				return nil
			}
			return c.asyncFailure(c.comm, res, err)
		}
		if i == 0 { // the clock is read only when the work is not done at once
			deadline = c.deadline(m)
		}
		if _, err := c.poll(ctx, c.comm, deadline); err != nil {
			return err
		}
		core.Pause(i, c.cfg.Poll)
	}
}

// asyncError returns the communicator's recorded asynchronous error, if any.
func (c *Communicator) asyncError(comm gpulib.Comm) error {
	res, err := c.d.CommGetAsyncError(comm)
	if asyncOK(res, err) {
		return nil
	}
	return c.asyncFailure(comm, res, err)
}

// asyncOK reports whether ncclCommGetAsyncError's answer says no error.
func asyncOK(res gpulib.Result, err error) bool {
	return err == nil && (res == gpulib.Success || res == gpulib.InProgress)
}

// asyncFailure is asyncError's error: the query's own failure, else the asynchronous
// error res, which makes the communicator unhealthy.
func (c *Communicator) asyncFailure(comm gpulib.Comm, res gpulib.Result, err error) error {
	if err != nil {
		return err
	}
	return c.fail(c.asyncErr(comm, res))
}

// asyncErr is the error of an asynchronous NCCL failure: the result and NCCL's text
// about it (ncclGetLastError), matching the result with errors.Is.
func (c *Communicator) asyncErr(comm gpulib.Comm, res gpulib.Result) error {
	return &gpulib.Error{Code: res, Detail: c.d.LastError(comm)}
}
