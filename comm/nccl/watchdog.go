package nccl

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// DefaultWatchdogInterval is how often the watchdog checks a communicator unless
// WithWatchdog says otherwise (PyTorch's default).
const DefaultWatchdogInterval = 100 * time.Millisecond

// WithWatchdog starts, for every communicator the option creates (and its Split and
// Shrink children), a goroutine that checks the communicator's health every interval
// (0 or less: DefaultWatchdogInterval, 100 ms): ncclCommGetAsyncError, and whether the
// work enqueued on the communication stream completes within the operation timeout
// (WithTimeout, 10 minutes by default, like PyTorch's). When either fails, IsHealthy
// turns false and stays false until a successful AttemptReconnect.
//
// The watchdog times work in batches: it records one event per interval after the
// operations enqueued since the last one, and a batch that has not completed when the
// operation timeout has passed since its first operation was enqueued marks the
// communicator failed. A stuck operation is thus reported at most one interval after
// its timeout (earlier by at most an interval when it is not the first of its batch).
// Operations on the caller's streams (SendTo, RecvFrom) are watched through
// ncclCommGetAsyncError only. Close stops the goroutine before the teardown.
func WithWatchdog(interval time.Duration) Option {
	return func(c *ncclcfg.Config) {
		if interval <= 0 {
			interval = DefaultWatchdogInterval
		}
		c.Watch.Interval = interval
	}
}

// WithAbortOnFailure makes the watchdog (started with DefaultWatchdogInterval unless
// WithWatchdog sets another) abort a communicator it finds failed, with ncclCommAbort,
// so that the calls waiting on it return at once (with ErrUnhealthy) and the peers'
// NCCL sees the failure. Only a group being submitted (GroupEnd, Group.Submit) holds
// the abort off until its calls are made; an open group's operations, which have not
// reached NCCL, then fail at its submission with ErrUnhealthy. Afterwards only
// AttemptReconnect and Close are useful: Shrink and Revoke need the failed
// communicator and report that it was aborted.
func WithAbortOnFailure() Option {
	return func(c *ncclcfg.Config) {
		c.Watch.Abort = true
		if c.Watch.Interval <= 0 {
			c.Watch.Interval = DefaultWatchdogInterval
		}
	}
}

// watchdog is the health checker of one communicator (WithWatchdog).
type watchdog struct {
	c        *Communicator
	interval time.Duration
	abort    bool
	now      func() time.Time // time.Now; tests replace it before the first operation

	// first is the time (UnixNano) the first operation since the last mark was
	// enqueued; 0 when none was.
	first atomic.Int64

	// Used by check only (the watchdog goroutine, or a test driving check itself).
	marks    []mark         // events recorded on the communication stream, oldest first
	free     []gpulib.Event // completed events for reuse
	comm     gpulib.Comm    // the communicator the marks were recorded for
	eventErr sync.Once      // the first failure to create an event is logged, once

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// mark is an event recorded after the operations enqueued since at (UnixNano); fr is
// the flight recorder's last operation when it was recorded (0 while the recorder is
// off), which its completion completes.
type mark struct {
	ev gpulib.Event
	at int64
	fr flightrec.ID
}

// startWatchdog starts c's watchdog if its options ask for one.
func startWatchdog(c *Communicator) *watchdog {
	if c.cfg.Watch.Interval <= 0 {
		return nil
	}
	w := &watchdog{c: c, interval: c.cfg.Watch.Interval, abort: c.cfg.Watch.Abort, now: time.Now,
		comm: c.comm, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// enqueued notes that an operation was enqueued on the communication stream. It reads
// the clock only for the first operation after each mark; the other operations cost
// one load, inlined.
func (w *watchdog) enqueued() {
	if w.first.Load() == 0 {
		w.firstSince()
	}
}

// firstSince is enqueued for the first operation since the last mark.
func (w *watchdog) firstSince() { w.first.CompareAndSwap(0, w.now().UnixNano()) }

// shutdown stops the goroutine and waits until it has released its events. It is
// safe to call on a nil watchdog and more than once.
func (w *watchdog) shutdown() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *watchdog) run() {
	defer close(w.done)
	// The events are created on this thread, with the rank's device current.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.c.d.SetDevice(); err != nil {
		w.c.cfg.Log.Warn("comm: watchdog could not make the device current", "rank", w.c.rank, "err", err)
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			w.release()
			return
		case <-t.C:
			w.check(w.now())
		}
	}
}

// check is one round: find a failure, and abort the failed communicator when asked to.
func (w *watchdog) check(now time.Time) {
	if w.inspect(now) && w.abort {
		w.abortFailed()
	}
}

// inspect reports whether the communicator has failed (now or before) and still needs
// an abort.
func (w *watchdog) inspect(now time.Time) bool {
	c := w.c
	c.life.RLock()
	defer c.life.RUnlock()
	if c.g.IsClosed() || c.comm == 0 {
		return false
	}
	if c.faultErr() != nil {
		return true
	}
	if c.comm != w.comm { // a new generation: the old marks say nothing about it
		w.forget()
		w.comm = c.comm
	}
	if err := c.asyncError(c.comm); err != nil {
		if code(err) == gpulib.Success { // the query itself failed
			c.fail(err)
		}
		return true
	}
	if err := w.retire(); err != nil {
		c.fail(fmt.Errorf("watchdog: event query: %w", err))
		return true
	}
	if c.cmdArmed.Load() {
		if waiting, cmdAt, aheadAt := w.commandState(); waiting {
			// A command receive holds the stream: a wait without deadline. Work queued
			// behind it has not started, so its time counts from now; work ahead of it
			// (older marks, and what evAhead covers) is timed as usual.
			at := now.UnixNano()
			if aheadAt != 0 && c.cfg.Timeout > 0 && now.Sub(time.Unix(0, aheadAt)) > c.cfg.Timeout {
				c.fail(fmt.Errorf("%w: work enqueued %v ago, ahead of a command receive, has not completed (watchdog, timeout %v)",
					comm.ErrTimeout, now.Sub(time.Unix(0, aheadAt)).Round(time.Millisecond), c.cfg.Timeout))
				return true
			}
			for i := range w.marks {
				if w.marks[i].at >= cmdAt {
					w.marks[i].at = at
				}
			}
			if w.first.Swap(0) != 0 {
				w.mark(at)
			}
		}
	}
	if len(w.marks) > 0 && c.cfg.Timeout > 0 {
		if age := now.Sub(time.Unix(0, w.marks[0].at)); age > c.cfg.Timeout {
			c.fail(fmt.Errorf("%w: work enqueued %v ago on the communication stream has not completed (watchdog, timeout %v)",
				comm.ErrTimeout, age.Round(time.Millisecond), c.cfg.Timeout))
			return true
		}
	}
	if at := w.first.Swap(0); at != 0 {
		w.mark(at)
	}
	return false
}

// commandState reports whether the command receive recorded by RecvCommandU32 is
// still waiting (once it has completed it disarms), when it was enqueued, and the time
// of the unmarked work ahead of it that has not completed (0 for none).
func (w *watchdog) commandState() (waiting bool, cmdAt, aheadAt int64) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aheadAt != 0 {
		if done, err := c.d.EventQuery(c.evAhead); err != nil || done {
			c.aheadAt = 0
		}
	}
	done, err := c.d.EventQuery(c.evCmd)
	if err != nil || done {
		c.cmdArmed.Store(false)
		return false, 0, 0
	}
	return true, c.cmdAt, c.aheadAt
}

// retire drops the marks whose work has completed, oldest first, and notes in the
// flight recorder that the operations recorded up to the last of them completed.
func (w *watchdog) retire() error {
	c := w.c
	var through flightrec.ID
	c.mu.Lock()
	fr := c.fr // set under mu (register), after the watchdog started
	err := func() error {
		for len(w.marks) > 0 {
			done, err := c.d.EventQuery(w.marks[0].ev)
			if err != nil || !done {
				return err
			}
			through = max(through, w.marks[0].fr)
			w.free = append(w.free, w.marks[0].ev)
			w.marks = w.marks[1:]
		}
		return nil
	}()
	c.mu.Unlock()
	if through != 0 {
		fr.CompletedThrough(through)
	}
	return err
}

// mark records an event after the work enqueued so far, the first of it at at.
func (w *watchdog) mark(at int64) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capturing(c.stream) { // an event recorded in a capture cannot be queried
		return
	}
	var ev gpulib.Event
	if n := len(w.free); n > 0 {
		ev, w.free = w.free[n-1], w.free[:n-1]
	} else {
		var err error
		if ev, err = c.d.EventCreate(); err != nil {
			w.eventErr.Do(func() {
				c.cfg.Log.Warn("comm: watchdog cannot create events; operation timeouts are not watched", "rank", c.rank, "err", err)
			})
			return
		}
	}
	if err := c.d.EventRecord(ev, c.stream); err != nil {
		w.free = append(w.free, ev)
		c.cfg.Log.Warn("comm: watchdog event record failed", "rank", c.rank, "err", err)
		return
	}
	// Operations are recorded and enqueued under mu: what the recorder holds now is
	// what the event follows.
	w.marks = append(w.marks, mark{ev: ev, at: at, fr: c.fr.LastLocked()})
}

// forget moves every mark's event to the free list.
func (w *watchdog) forget() {
	for _, m := range w.marks {
		w.free = append(w.free, m.ev)
	}
	w.marks = w.marks[:0]
}

// release destroys the watchdog's events.
func (w *watchdog) release() {
	w.forget()
	for _, ev := range w.free {
		if err := w.c.d.EventDestroy(ev); err != nil {
			w.c.cfg.Log.Warn("comm: watchdog event destroy failed", "rank", w.c.rank, "err", err)
		}
	}
	w.free = nil
}

// abortFailed aborts the failed communicator (WithAbortOnFailure): it interrupts the
// waiting operations, takes the communicator exclusively, and calls ncclCommAbort,
// unless the communicator is closed or already aborted. A group being submitted holds
// the communicator (shared) and so holds the abort off until its calls are made; a
// group merely open (recorded calls only, or left open by a goroutine that ended, or a
// Group never submitted) does not: nothing of it has reached NCCL, and its submission
// fails on the aborted communicator.
func (w *watchdog) abortFailed() {
	c := w.c
	c.interrupt.Store(interruptAbort)
	c.life.Lock()
	defer c.life.Unlock()
	c.interrupt.Store(interruptNone)
	if c.g.IsClosed() || c.comm == 0 || c.faultErr() == nil {
		return
	}
	err := c.d.CommAbort(c.comm)
	c.comm = 0
	w.forget()
	c.cfg.Log.Warn("comm: watchdog aborted the failed communicator", "rank", c.rank, "fault", c.faultErr(), "abort_err", err)
}
