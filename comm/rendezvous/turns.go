package rendezvous

import (
	"runtime"
	"sync"
	"time"
)

// turns schedules the handling of requests fairly between clients. A connection
// handles each request in a turn; at most n turns run at once, and when all are
// taken, the next free one goes to the clients waiting in round robin (a client is a
// share: a source host, see clientIdentity), and within a client to its connections in
// the order they asked. So a client that keeps the server busy (a flood of pipelined
// requests, requests naming thousands of keys, many connections) waits for its turns
// behind every other client's next request instead of ahead of them: a client's
// request waits for at most one request of each other client waiting. A turn covers
// what a request does with the store and the encoding of its reply, never a write to
// the network, so a client that stops reading holds no turn.
//
// n is one less than the processors the Go runtime runs goroutines on (at least one),
// so that one stays free to notice new requests: with every processor busy, the
// runtime looks for sockets that became readable only every few milliseconds.
type turns struct {
	mu    sync.Mutex
	epoch time.Time
	free  int      // turns not taken
	ring  []*share // clients with connections waiting, in the order they are served

	window   int64     // start of the current quota window, ns since epoch
	active   [2]int    // clients that took turns in the current window and the one before
	recent   [2]*share // the last two clients that took turns, most recent first
	recentAt [2]int64  // when
}

// Quotas while clients compete: when more than one client took turns within
// turnContention, each may spend at most turnQuota of every turnWindow in turns,
// shared by the clients active in this window or the one before (less one, for the
// clients whose requests are few, which never reach any quota), and waits for the next
// window once it has. A client alone is never held back. Clients that flood the server
// while others use it get a tenth of a processor between them, so that the server, the network
// stack and the other clients' processes keep time to answer the others promptly.
// The time counted is the turn's and, before it, the reading and decoding of the
// request; a client over its quota also reads nothing more until its next window
// (pace). The quota is deliberately not work-conserving: a flood is slowed even when
// the processor has time left, since what delays the others then is not the store's
// lock but the kernel's and the runtime's work on the flood's bytes.
const (
	turnWindow     = 10 * time.Millisecond
	turnQuota      = turnWindow / 10
	turnContention = 100 * time.Millisecond
)

func newTurns() *turns { return &turns{epoch: time.Now(), free: max(1, runtime.GOMAXPROCS(0)-1)} }

// now is the time since t.epoch, on the monotonic clock.
func (t *turns) now() int64 { return int64(time.Since(t.epoch)) }

// holdBackLocked notes that a asks for a turn at now and returns how long it must
// wait first (0: not at all).
func (t *turns) holdBackLocked(a *share, now int64) time.Duration {
	t.noteLocked(a, now)
	return t.overQuotaLocked(a, now)
}

// pace returns once c's client is within its quota, before c reads its next request:
// a client over its quota reads nothing more until the next window, so that the
// peer's further requests wait in the network, not in the server.
// Before it waits it calls idle (when not nil), which writes what c has queued.
func (t *turns) pace(c *serverConn, idle func()) {
	a := c.acct.share
	for {
		t.mu.Lock()
		d := t.overQuotaLocked(a, t.now())
		t.mu.Unlock()
		if d <= 0 {
			return
		}
		if idle != nil {
			idle()
			idle = nil
		}
		c.mayBlock()
		time.Sleep(d)
	}
}

// noteLocked records that a asked for a turn at now.
func (t *turns) noteLocked(a *share, now int64) {
	t.rollLocked(a, now)
	if !a.noted {
		a.noted = true
		t.active[0]++
	}
	switch {
	case t.recent[0] == a:
		t.recentAt[0] = now
	case t.recent[1] == a:
		t.recent[0], t.recent[1] = a, t.recent[0]
		t.recentAt[0], t.recentAt[1] = now, t.recentAt[0]
	default:
		t.recent[1], t.recentAt[1] = t.recent[0], t.recentAt[0]
		t.recent[0], t.recentAt[0] = a, now
	}
}

// rollLocked moves to the window of now, and a's count to it.
func (t *turns) rollLocked(a *share, now int64) {
	if d := now - t.window; d >= int64(turnWindow) {
		t.active[1] = t.active[0]
		if d >= 2*int64(turnWindow) {
			t.active[1] = 0
		}
		t.active[0] = 0
		t.window = now - d%int64(turnWindow)
	}
	if a.window != t.window {
		a.window, a.spent, a.noted = t.window, 0, false
	}
}

// overQuotaLocked returns how long a must wait for its next turn while clients compete.
func (t *turns) overQuotaLocked(a *share, now int64) time.Duration {
	t.rollLocked(a, now)
	contended := t.recent[1] != nil && now-t.recentAt[1] < int64(turnContention)
	if !contended || a.spent < int64(turnQuota)/int64(max(2, t.active[0], t.active[1])-1) {
		return 0
	}
	return time.Duration(t.window + int64(turnWindow) - now)
}

// acquire returns once c holds a turn. The time since c's request began to arrive
// (c.readAt: reading and decoding it) counts as spent too.
func (t *turns) acquire(c *serverConn) {
	a := c.acct.share
	for read := true; ; read = false {
		t.mu.Lock()
		now := t.now()
		if read && a.window == t.window && c.readAt > 0 {
			a.spent += now - max(c.readAt, t.window)
		}
		if d := t.holdBackLocked(a, now); d > 0 {
			t.mu.Unlock()
			c.mayBlock()
			time.Sleep(d)
			continue
		}
		if t.free > 0 && len(t.ring) == 0 {
			t.free--
			t.mu.Unlock()
			c.turnAt = now
			return
		}
		if len(a.waiting) == 0 {
			t.ring = append(t.ring, a)
		}
		a.waiting = append(a.waiting, c)
		t.mu.Unlock()
		c.mayBlock()
		<-c.turn
		c.turnAt = t.now()
		return
	}
}

// release ends c's turn, handing it to the next client waiting.
func (t *turns) release(c *serverConn) {
	t.mu.Lock()
	if a := c.acct.share; a.window == t.window {
		a.spent += t.now() - c.turnAt
	}
	if len(t.ring) == 0 {
		t.free++
		t.mu.Unlock()
		return
	}
	a := t.ring[0]
	t.ring[0] = nil
	t.ring = t.ring[1:]
	next := a.waiting[0]
	a.waiting[0] = nil
	a.waiting = a.waiting[1:]
	if len(a.waiting) > 0 {
		t.ring = append(t.ring, a) // its next connection, after every other client
	} else {
		a.waiting = nil
	}
	if len(t.ring) == 0 {
		t.ring = nil
	}
	t.mu.Unlock()
	next.turn <- struct{}{}
}

// charge counts the time since start as spent by c's client, for a request handled
// without a turn: torch's connections write their answers as they handle a query, and
// a turn must never wait on the network. They are held to the same quotas (pace), but
// not served in round robin.
func (t *turns) charge(c *serverConn, start int64) {
	a := c.acct.share
	t.mu.Lock()
	now := t.now()
	t.noteLocked(a, now)
	t.rollLocked(a, now)
	a.spent += now - max(start, t.window)
	t.mu.Unlock()
}
