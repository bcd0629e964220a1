package flightrec

import (
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/core"
)

// backoffMax is the longest sleep between two tries of Reclaim and of a dump's read.
const backoffMax = 50 * time.Microsecond

// The states of a ring registered with Group.Lock, for Lend: the lock's holder may
// write it (ringHeld), it lent it while it waits (ringLent), or a dump reads it
// (ringRead).
const (
	ringHeld int32 = iota
	ringLent
	ringRead
)

// Lend lets a dump read the ring while the caller, who holds Group.Lock, waits without
// recording: for NCCL to leave ncclInProgress, or in a call that waits for the other
// ranks (a window's registration). A hang is such a wait, and a dump must not wait for
// it. The caller records, marks or reads nothing of the ring until Reclaim. Lend and
// Reclaim cost an atomic operation each; on a ring with its own lock they do nothing.
func (c *Comm) Lend() {
	if c != nil && c.ext {
		c.lend.Store(ringLent)
	}
}

// Reclaim ends Lend: it returns once no dump reads the ring, which the caller may then
// write again. A Reclaim without a Lend before it returns at once.
func (c *Comm) Reclaim() {
	if c == nil || !c.ext {
		return
	}
	for i := 0; !c.lend.CompareAndSwap(ringLent, ringHeld) && c.lend.Load() == ringRead; i++ {
		core.Pause(i, backoffMax) // a dump reads the ring: it hands it back in microseconds
	}
}

// read runs f with the ring readable by the caller (a dump): under its lock, or, while
// the lock's holder lent it, borrowed. It waits while the holder keeps the ring
// without lending it (a record takes microseconds).
func (c *Comm) read(f func()) {
	for i := 0; ; i++ {
		if c.lk.TryLock() {
			f()
			c.lk.Unlock()
			return
		}
		if c.ext && c.lend.CompareAndSwap(ringLent, ringRead) {
			f()
			c.lend.Store(ringLent)
			return
		}
		core.Pause(i, backoffMax)
	}
}
