package rendezvous

import (
	"runtime"
	"sync"
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
	mu   sync.Mutex
	free int      // turns not taken
	ring []*share // clients with connections waiting, in the order they are served
}

func newTurns() *turns { return &turns{free: max(1, runtime.GOMAXPROCS(0)-1)} }

// acquire returns once c holds a turn.
func (t *turns) acquire(c *serverConn) {
	t.mu.Lock()
	if t.free > 0 && len(t.ring) == 0 {
		t.free--
		t.mu.Unlock()
		return
	}
	a := c.acct.share
	if len(a.waiting) == 0 {
		t.ring = append(t.ring, a)
	}
	a.waiting = append(a.waiting, c)
	t.mu.Unlock()
	<-c.turn
}

// release ends a turn, handing it to the next client waiting.
func (t *turns) release() {
	t.mu.Lock()
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
