package rendezvous

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// parkAfter is how long a connection past its handshake may wait for its client's
// next request on a goroutine of its own. A connection silent that long is parked:
// its goroutine ends and its read buffers go back to the free list (bufs), and the
// server's poller (epoll, poll_linux.go) serves it again once bytes arrive, on the
// poller's own goroutine or a new one, or when the connection closes or its idle
// timeout passes. A connection in use keeps its goroutine, so
// parking costs nothing per request; an idle rank costs its socket and its state
// (doc.go), not a goroutine's stack and 8 KiB of buffers.
const parkAfter = 250 * time.Millisecond

// maxAwaiting is how many connections at most wait for their clients' next requests
// on goroutines of their own (parkAfter) while new: past it, a connection that has
// answered fewer than newcomerWaits requests since its handshake and has no byte of
// the next one parks at once. A bring-up, where thousands of ranks each send a
// request or two within parkAfter, then holds a few dozen goroutines, not one per
// rank: each holds a stack and read buffers (12 KiB or more) while it waits, and the
// runtime keeps a goroutine's descriptor for the rest of the process's life once that
// many were alive at once. A connection past its first requests that keeps sending
// (a client in a steady exchange) waits on its goroutine as before, whatever the
// number: a request on a parked connection costs more server CPU than one on a
// waiting goroutine (BenchmarkParkedRequestCPU).
const maxAwaiting = 64

// newcomerWaits is how many waits for a next request, from its handshake on, a
// connection spends under maxAwaiting.
const newcomerWaits = 8

// startPoller starts the server's poller (a variable so that tests can make it fail
// as it does when the process is out of descriptors or memory).
var startPoller = newPoller

// pollRetry is how long after a failure to start the poller the server tries again.
const pollRetry = time.Second

// bufs holds the read buffers of parked and closed connections for the next
// connection that needs them.
var bufs bufCache

// bufCache is a free list of read buffers. Unlike a sync.Pool it keeps them across
// collections and knows how many it holds: what a wake storm leaves in it (one reader
// and one frame buffer per connection that was awake at once) is what the memory
// janitor gives back to the operating system once the storm has passed, and
// connections woken one at a time, which leave at most a few, never cost a
// collection.
type bufCache struct {
	mu      sync.Mutex
	readers []*bufio.Reader
	smalls  [][]byte
	keys    []keyList // torch connections' spare key buffers (tsReader.spare)
	// lists holds the key lists of queries of many keys (a WAIT for every rank's key),
	// handed from one such query to the next (tsReader.keyList).
	lists []keyList
	// takes counts the buffers taken, for the janitor to see whether a storm goes on.
	takes atomic.Int64
}

// reader returns a read buffer reading from r.
func (b *bufCache) reader(r io.Reader) *bufio.Reader {
	b.takes.Add(1)
	b.mu.Lock()
	br, ok := pop(&b.readers)
	b.mu.Unlock()
	if !ok {
		return bufio.NewReaderSize(r, smallFrame)
	}
	br.Reset(r)
	return br
}

// small returns a frame buffer of smallFrame bytes.
func (b *bufCache) small() []byte {
	b.takes.Add(1)
	b.mu.Lock()
	f, ok := pop(&b.smalls)
	b.mu.Unlock()
	if !ok {
		return make([]byte, smallFrame)
	}
	return f
}

// spareKeys returns empty key buffers for a query of a few short keys
// (tsReader.spare).
func (b *bufCache) spareKeys() keyList {
	b.takes.Add(1)
	b.mu.Lock()
	l, ok := pop(&b.keys)
	b.mu.Unlock()
	if !ok {
		return keyList{buf: make([]byte, 0, spareKeyBytes), ends: make([]int, 0, spareKeys)}
	}
	return l
}

// keyList returns an empty key list of a query of many keys: one a query has
// finished with, else one with no buffers.
func (b *bufCache) keyList() keyList {
	b.takes.Add(1)
	b.mu.Lock()
	l, _ := pop(&b.lists)
	b.mu.Unlock()
	return l
}

// maxPooledList is the size of the largest key list a query gives back (putList).
const maxPooledList = 256 << 10

// putList keeps l, the key list of a query of many keys that has been answered, for
// the next such query, unless it is larger than maxPooledList.
func (b *bufCache) putList(l keyList) {
	if cap(l.buf)+8*cap(l.ends) <= maxPooledList {
		b.keepKeys(&b.lists, l)
	}
}

// putKeys keeps l, a connection's spare key buffers, for the next connection.
func (b *bufCache) putKeys(l keyList) { b.keepKeys(&b.keys, l) }

// keepKeys appends l, emptied, to the free list *to (nothing when l has no buffers).
func (b *bufCache) keepKeys(to *[]keyList, l keyList) {
	if l.ends == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	*to = append(*to, keyList{buf: l.buf[:0], ends: l.ends[:0]})
}

// pop takes the last element of *s, clearing its slot; false when *s is empty.
func pop[T any](s *[]T) (T, bool) {
	var zero T
	n := len(*s)
	if n == 0 {
		return zero, false
	}
	v := (*s)[n-1]
	(*s)[n-1] = zero
	*s = (*s)[:n-1]
	return v, true
}

// put keeps br and small (either may be nil) for the next connection.
func (b *bufCache) put(br *bufio.Reader, small []byte) {
	if br != nil {
		br.Reset(nil)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if br != nil {
		b.readers = append(b.readers, br)
	}
	if small != nil {
		b.smalls = append(b.smalls, small)
	}
}

// held returns how many buffers the cache holds.
func (b *bufCache) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.readers) + len(b.smalls) + len(b.keys) + len(b.lists)
}

// drop lets go of every buffer held (the next collection frees them).
func (b *bufCache) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.readers, b.smalls, b.keys, b.lists = nil, nil, nil, nil
}

// run runs step on the connection's goroutine, recovering a panic; unless step
// parked the connection, the connection ends with it.
func (c *serverConn) run(step func(resumed bool) bool, resumed bool) {
	parked := false
	defer func() {
		if !parked {
			c.dropReservation() // it ended before its first read
			c.close()
			c.s.wg.Done()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			c.s.log.Error("rendezvous server: panic while serving a connection; closing it", "remote", c.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	parked = step(resumed)
}

// parkable reports whether c may be parked: it is past its handshake, not under TLS
// (whose reader may hold bytes the socket no longer shows), and the platform has a
// poller.
func (c *serverConn) parkable() bool {
	return pollSupported && c.authed && c.nc == c.raw && c.step != nil
}

// await waits for the first byte of c's next request for at most parkAfter (and
// never past c.idleBy). It reports parked when c was silent that long and now waits
// in the poller: the calling goroutine must then return at once. An error is the
// read's (the idle timeout, a closed connection). A connection that cannot be parked
// returns at once and reads as before.
//
// A connection woken after a long silence (parkAfter or more) is parked again at
// once after its first request when no byte of a next one waits: an idle rank's
// occasional request then costs no read deadline that fires and no second wake of
// its goroutine 250 ms later. If its client speaks again before parkAfter has passed
// (a sequence of requests), it waits on its goroutine as a busy connection does. A
// torch connection woken for a WAIT parks at once too, and the GET that torch's
// client sends next wakes it again: both are served on the poller's goroutine,
// where waiting for the GET would take a goroutine of its own. While maxAwaiting
// connections wait on their goroutines, a new one (its first newcomerWaits waits)
// parks at once after its request.
func (c *serverConn) await() (parked bool, err error) {
	if c.br.Buffered() > 0 || !c.parkable() {
		return false, nil
	}
	if c.resumed {
		// The first await after a wake: the request that woke c, if any, is read
		// under parkAfter below (the wake may also be the idle timer's, or a hang-up).
		c.resumed = false
	} else {
		newcomer := c.settled < newcomerWaits
		if newcomer {
			c.settled++
		}
		if c.soon || (newcomer && c.s.awaiting.Load() >= maxAwaiting) {
			c.soon = false
			if err := c.beforeRead(); err != nil { // the answers queued so far go out first
				return false, err
			}
			if c.park() {
				return true, nil
			}
		}
		// Past the request that woke it, c serves a sequence of requests: on a
		// goroutine of its own, not the poller's, whose other connections would wait
		// as long as its client keeps sending.
		c.mayBlock()
	}
	by := time.Now().Add(parkAfter)
	if !c.idleBy.IsZero() && c.idleBy.Before(by) {
		by = c.idleBy
	}
	_ = c.nc.SetReadDeadline(by)
	c.s.noteAwaiting(1)
	_, err = c.br.Peek(1)
	c.s.noteAwaiting(-1)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || (!c.idleBy.IsZero() && !time.Now().Before(c.idleBy)) {
		return false, err
	}
	if c.park() {
		c.s.waitedParks.Add(1)
		return true, nil
	}
	// Not parked (no poller now): wait on this goroutine, under the idle timeout only.
	err = c.nc.SetReadDeadline(c.idleBy)
	return false, err
}

// noteAwaiting counts a connection that begins (d 1) or ends (d -1) waiting on its
// goroutine for its client's next request.
func (s *Server) noteAwaiting(d int64) {
	n := s.awaiting.Add(d)
	for peak := s.awaitPeak.Load(); n > peak && !s.awaitPeak.CompareAndSwap(peak, n); peak = s.awaitPeak.Load() {
	}
}

// park hands c to the poller, its buffers to the pools. It reports false when c
// stays with the calling goroutine (no poller, or c could not be registered).
func (c *serverConn) park() bool {
	p := c.s.poller()
	if p == nil {
		return false
	}
	own := c.torch // the state the calling goroutine serves c with
	c.dropBuffers()
	c.detach(p)
	c.hibernate()
	if !c.idleBy.IsZero() && c.idleTimer == nil {
		// Made here, stopped, so that the goroutine it starts sees it.
		c.idleTimer = time.AfterFunc(time.Hour, c.wake)
		c.idleTimer.Stop()
	}
	idleBy, timer := c.idleBy, c.idleTimer
	c.parkedAt = c.s.turns.now()
	c.parked.Store(true) // from here on, c may be woken: its fields are the new goroutine's
	if !idleBy.IsZero() {
		timer.Reset(time.Until(idleBy)) // a late one wakes c early, and c parks again
	}
	if p.park(c) {
		return true
	}
	if !c.parked.CompareAndSwap(true, false) {
		return true // woken meanwhile: a new goroutine serves c
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if own != nil { // the calling goroutine goes on with the state hibernate let go of
		c.s.mu.Lock()
		c.torch = own
		c.s.mu.Unlock()
	}
	c.takeBuffers()
	return false
}

// detach lets go of the Go connection of c, about to park, and keeps its bare
// descriptor (sock), unless replies wait to be written: a reply written later (a
// blocked request answered while c is parked) goes to the descriptor.
func (c *serverConn) detach(p *poller) {
	k, ok := asSock(c.raw)
	if !ok || k.detached() {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.queued() > 0 {
		return
	}
	if t := c.torch; t != nil {
		t.wmu.Lock()
		defer t.wmu.Unlock()
		if len(t.out) > 0 {
			return
		}
	}
	p.detach(c, k)
}

// wake gives a parked connection a goroutine again; it does nothing to one that is
// not parked.
func (c *serverConn) wake() {
	if c.parked.CompareAndSwap(true, false) {
		if c.step == nil { // in the lobby (lobby.go): it has spoken, hung up or is dropped
			go c.s.leaveLobby(c)
			return
		}
		go c.run(c.resume, true)
	}
}

// resume is the first step of serving a woken connection, on the goroutine that wake
// started or on the poller's (serveInline).
func (c *serverConn) resume(bool) bool {
	c.s.resumes.Add(1)
	if c.torchGen != 0 {
		c.s.mu.Lock()
		t := c.torch // an answer queue's goroutine may have let go of it (hibernateParked)
		c.s.mu.Unlock()
		if t == nil {
			c.newTorch(TorchProtocol(c.torchGen))
		}
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop() // a timer that fires late wakes nothing or a connection that parks again
	}
	c.takeBuffers()
	c.resumed = true
	// The GET that follows a WAIT parks again at once, as the WAIT did.
	c.soon = c.getNext || c.s.turns.now()-c.parkedAt >= int64(parkAfter)
	return c.step(c, true)
}

// mayBlock hands the poller to a new goroutine if the poller's goroutine serves c now
// (poll_linux.go): c is about to wait, and parked connections must not wait with it.
func (c *serverConn) mayBlock() {
	if c.s == nil { // a connection made by a test of turns alone
		return
	}
	if p := c.s.pollNow.Load(); p != nil {
		p.handOff(c)
	}
}

// leader returns the server's poller if the poller's goroutine serves c now, else nil.
func (c *serverConn) leader() *poller {
	if p := c.s.pollNow.Load(); p != nil && p.serving(c) {
		return p
	}
	return nil
}

// write writes b to c's connection. On the poller's goroutine it first writes what
// the socket takes at once, and hands the poller off before it waits for the rest.
func (c *serverConn) write(b []byte) (int, error) {
	if p := c.leader(); p != nil {
		n, err := writeNow(c.rawConn(), b)
		if err != nil || n == len(b) {
			return n, err
		}
		p.handOff(c)
		m, err := c.nc.Write(b[n:])
		return n + m, err
	}
	return c.nc.Write(b)
}

// shut closes c's connection from any goroutine; a parked connection is woken to
// end, as a blocked read would.
func (c *serverConn) shut() {
	_ = c.nc.Close()
	c.wake()
}

// dropBuffers gives c's read buffers back to the pools, and lets go of the write
// buffers when nothing is queued.
func (c *serverConn) dropBuffers() {
	c.putReadBuffers()
	c.releaseBig() // and its share of the bytes in flight
	c.fields = nil
	c.wmu.Lock()
	if c.queued() == 0 {
		c.out = nil
	}
	c.wmu.Unlock()
	if t := c.torch; t != nil {
		t.rd.r = nil
		bufs.putKeys(t.rd.spare) // the next query of a few keys takes them again
		t.rd.spare = keyList{}
		t.wmu.Lock()
		if len(t.out) == 0 {
			t.out = nil
		}
		t.wmu.Unlock()
	}
}

// putReadBuffers gives c's read buffers back to the pools.
func (c *serverConn) putReadBuffers() {
	bufs.put(c.br, c.small)
	c.br, c.small = nil, nil
}

// takeBuffers gives c read buffers again (dropBuffers).
func (c *serverConn) takeBuffers() {
	c.br = bufs.reader(heardReader{c})
	if c.torch != nil {
		c.torch.rd.r = c.br
	} else {
		c.small = bufs.small()
	}
}

// forget unregisters c from the poller when it ends.
func (c *serverConn) forget() {
	c.s.mu.Lock()
	p := c.s.poll
	c.s.mu.Unlock()
	if p != nil {
		p.forget(c)
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
}

// poller returns the server's poller, started at the first park; nil when the
// platform has none, the server is closed, or it failed to start less than pollRetry
// ago (out of descriptors or memory: a later park tries again).
func (s *Server) poller() *poller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollerLocked()
}

// pollerLocked is poller with s.mu held.
func (s *Server) pollerLocked() *poller {
	if s.closed || (!s.pollFailed.IsZero() && time.Since(s.pollFailed) < pollRetry) {
		return nil
	}
	if s.poll == nil {
		p, err := startPoller()
		if err != nil {
			s.pollFailed = time.Now()
			s.warn("rendezvous server: idle connections keep their goroutines until the poller starts", "err", err, "retry_in", pollRetry)
			return nil
		}
		s.pollFailed = time.Time{}
		s.poll = p
		s.pollNow.Store(p)
		p.lead = func() {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				p.run()
			}()
		}
		p.lead()
	}
	return s.poll
}
