package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// closeFlushTimeout bounds how long Close spends writing each reply already due.
const closeFlushTimeout = time.Second

// recvWindow is the kernel's receive buffer of each connection, the most a peer can
// have sent that the server has not read: small, so that a client the server holds
// back (turns) cannot queue megabytes in the kernel, whose processing would delay
// everyone's packets.
const recvWindow = 64 << 10

// smallFrame is the size of each connection's own frame buffer (counted in
// connOverhead); larger frames reserve their buffer from the budget as they arrive.
const smallFrame = 4 << 10

// Memory release: when what the budget counts has dropped by releaseDrop since its
// peak and stays put for one releaseTick, the server returns the freed memory to the
// operating system (debug.FreeOSMemory), at most once per releaseTick.
// It does so too once the buffers cached for connections (bufCache) number
// releaseBufs (a quarter of a MiB of read buffers) or more and fewer than releaseBusy
// were taken in the last tick: a bring-up or a wake storm leaves behind the buffers of
// the connections that were awake at once, and an idle server would keep them for
// good. Connections woken one at a time take and give back the same few, and cost
// no collection. And once the process has allocated
// releaseDrop since the last collection forced in it (this release, or another
// server's or the application's) and less than releaseCalm in the last tick: a storm
// served one connection after another leaves few buffers but its garbage (and its
// clients', in their process), which an idle process never collects. And, for the
// smaller garbage of a wake storm of a few thousand idle connections (each woken
// connection's state made anew, the state a bring-up held until its last key came),
// once the process has allocated releaseIdle and a sixteenth of its live heap since
// the last collection forced in it, and less than releaseQuiet in the last tick: it
// has gone quiet. (A collection the runtime ran meanwhile does not count: what died
// after it is garbage too, and nothing tells how much.) A steady trickle of
// requests allocates more than releaseQuiet per tick, and costs no collection until it
// stops; in an application with a large heap of its own, the sixteenth keeps the
// collections it costs few.
const (
	releaseTick  = 500 * time.Millisecond
	releaseDrop  = 16 << 20
	releaseBufs  = 64
	releaseBusy  = 32
	releaseCalm  = 1 << 20
	releaseIdle  = 256 << 10
	releaseQuiet = 32 << 10
)

// heapAllocs returns the bytes the process has allocated on the heap in all, how many
// collections it has forced (runtime.GC, debug.FreeOSMemory: its own janitor's,
// another server's or the application's), and the heap its last collection found
// live.
func heapAllocs() (allocs, forced, live uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/forced:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return v(0), v(1), v(2)
}

// inlineStall is how long the poller's goroutine may serve one connection before
// the janitor, at its next tick, gives the poller to a new goroutine (a backstop:
// the waits of a connection hand it off themselves). A variable so that tests can
// check those without it.
var inlineStall = 100 * time.Millisecond

// Server is the key-value store. Rank 0 usually embeds one (NewServer, then Serve or
// ListenAndServe); tools/rendezvous runs one on its own. It serves any number of
// listeners and clients until Close or until a Serve context ends. The zero value is a
// server with the default settings.
type Server struct {
	once sync.Once // fills in a zero Server
	cfg  serverConfig
	log  *slog.Logger
	done chan struct{} // closed by Close

	st       *store
	budget   *budget
	rooms    *budget // the part of the budget kept for connections (connRoom)
	inflight *budget // bytes of large frames being read, across all connections
	turns    *turns  // fair scheduling of requests between clients
	auth     authLimiter
	warns    warnLimiter
	// torchUnknown holds the unknown TCPStore queries already logged (tcpstore_server.go).
	torchUnknown sync.Map

	wg         sync.WaitGroup // Serve loops, connections and the memory janitor
	deliveries sync.WaitGroup // replies to blocked requests not yet written
	answers    answerQueue    // torch connections whose waits fired (answerFired)
	// handling is held shared while a connection handles a request and writes its
	// reply; Close takes it exclusively before it closes the connections, so that a
	// reply already due is written first.
	handling sync.RWMutex
	janitor  sync.Once

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	unauth    []*serverConn     // connections still in their handshake, oldest first
	queued    []*serverConn     // accepted, waiting for a handshake slot (admitQueued)
	admitting bool              // admitQueued runs
	slotFreed chan struct{}     // a handshake slot was left (accept waits on it)
	authed    int               // connections past their handshake
	clients   map[string]*share // by clientIdentity: those with connections or charges
	// lobby holds the connections accepted while every handshake slot was taken that
	// had sent nothing yet, oldest first (lobby.go); lobbyN counts those still there
	// (the slice may hold some that left).
	lobby  []*serverConn
	lobbyN int
	// poll watches parked connections (park.go), from the first park until Close.
	poll       *poller
	pollFailed time.Time // when it last failed to start (zero: it did not)
	// pollNow is poll, for the connections' reads and writes (which do not lock mu).
	pollNow atomic.Pointer[poller]
	// waitedParks counts the parks that waited parkAfter on a goroutine first, and
	// resumes the goroutines started for parked connections.
	waitedParks, resumes atomic.Int64
	// awaiting counts the connections whose goroutines wait for their clients' next
	// requests (await), and awaitPeak the most there were at once.
	awaiting, awaitPeak atomic.Int64
}

// NewServer returns a server configured by opts; it listens nowhere until Serve or
// ListenAndServe.
func NewServer(opts ...ServerOption) *Server {
	s := &Server{}
	s.init(opts)
	return s
}

func (s *Server) init(opts []ServerOption) {
	s.once.Do(func() {
		s.cfg = serverConfig{
			handshakeTimeout: DefaultHandshakeTimeout,
			idleTimeout:      DefaultIdleTimeout,
			maxConns:         DefaultMaxConns,
			maxUnauth:        DefaultMaxHandshakes,
			maxStoreBytes:    DefaultMaxStoreBytes,
		}
		for _, o := range opts {
			if o != nil {
				o.applyServer(&s.cfg)
			}
		}
		if s.cfg.log == nil {
			s.cfg.log = slog.Default()
		}
		if s.cfg.maxClientBytes <= 0 || s.cfg.maxClientBytes > s.cfg.maxStoreBytes {
			s.cfg.maxClientBytes = max(s.cfg.maxStoreBytes/DefaultClientShare, min(s.cfg.maxStoreBytes, 1<<20))
		}
		s.log = s.cfg.log
		s.done = make(chan struct{})
		s.slotFreed = make(chan struct{}, 1)
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[*serverConn]struct{})
		s.clients = make(map[string]*share)
		rooms := connRoom(s.cfg.maxStoreBytes, s.cfg.maxConns)
		s.rooms = &budget{limit: rooms, whole: s.cfg.maxStoreBytes}
		s.budget = &budget{limit: s.cfg.maxStoreBytes - rooms, whole: s.cfg.maxStoreBytes}
		s.inflight = &budget{limit: max(s.cfg.maxStoreBytes/4, 2*MaxFrameLen)}
		s.st = newStore(s.budget)
		s.st.world = s.cfg.world
		s.turns = newTurns()
		if s.cfg.token != "" && len(s.cfg.token) < minTokenLen {
			s.log.Warn("rendezvous server: the token is short and may be guessed; use NewToken or tools/rendezvous -new-token", "len", len(s.cfg.token), "want_at_least", minTokenLen)
		}
	})
}

// warn logs a warning, at most warnBurst at once and then once a second per message.
func (s *Server) warn(msg string, args ...any) { s.warns.log(s.log, slog.LevelWarn, msg, args...) }

// ListenAndServe listens on the TCP address addr (":29500", "127.0.0.1:0") and serves
// it like Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	s.init(nil)
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("rendezvous server: listen on %q: %w", addr, err)
	}
	return s.Serve(ctx, l)
}

// Serve accepts connections on l until Close or until ctx ends, which closes the whole
// server. It returns nil when stopped that way, ErrClosed when the server was already
// closed, and the listener's error when accepting fails for good. Serve takes ownership
// of l and closes it.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if l == nil {
		return fmt.Errorf("rendezvous server: %w: nil listener", ErrInvalidArgument)
	}
	s.init(nil)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return fmt.Errorf("rendezvous server: serve on %s: %w", l.Addr(), ErrClosed)
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.janitor.Do(func() {
		s.wg.Add(1)
		go s.releaseMemory()
	})
	s.mu.Unlock()
	defer s.wg.Done()
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		_ = l.Close()
	}()

	s.log.Info("rendezvous server listening", "addr", l.Addr().String(), "auth", s.cfg.token != "", "tls", s.cfg.tls != nil,
		"max_conns", s.cfg.maxConns, "max_handshakes", s.cfg.maxUnauth, "max_host_conns", s.cfg.maxHostConns)
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("rendezvous server: accept on %s: %w", l.Addr(), err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.warn("rendezvous server: accept failed, retrying", "addr", l.Addr().String(), "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-s.done:
				return nil
			}
		}
		delay = 0
		s.accept(nc)
	}
}

// Close stops every listener, writes the replies already due to Gets and Waits whose
// keys were set (allowing each at most a second), closes every connection
// (blocked Gets and Waits on the clients then fail), and returns once all the server's
// goroutines have ended. It is safe to call more than once and from any goroutine.
func (s *Server) Close() error {
	s.init(nil)
	s.mu.Lock()
	var listeners []net.Listener
	var conns []*serverConn
	var flushes []func() error
	if !s.closed {
		s.closed = true
		close(s.done)
		for l := range s.listeners {
			listeners = append(listeners, l)
		}
		for c := range s.conns {
			conns = append(conns, c)
			flushes = append(flushes, c.flushOut())
		}
	}
	queued := s.queued
	s.queued = nil
	s.mu.Unlock()
	for _, c := range queued {
		_ = c.nc.Close()
	}
	s.st.close()
	for _, l := range listeners {
		_ = l.Close()
	}
	flush := time.Now().Add(closeFlushTimeout)
	for _, c := range conns {
		_ = c.nc.SetWriteDeadline(flush)
	}
	s.deliveries.Wait()
	s.handling.Lock() // the requests being handled write their replies (by flush)
	// Replies may still wait in a connection's queue: held back to go out with the
	// reply to a pipelined request that will not be handled now, or queued by a
	// delivery meanwhile. They are due: write them, all connections at once.
	var writes sync.WaitGroup
	for i := range conns {
		writes.Go(func() { _ = flushes[i]() })
	}
	writes.Wait()
	s.handling.Unlock()
	for _, c := range conns {
		c.shut()
	}
	s.mu.Lock()
	p := s.poll
	s.mu.Unlock()
	if p != nil {
		p.close()
	}
	s.wg.Wait()
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// numConns reports open connections (for tests).
func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// releaseMemory reports the warnings that were suppressed, and returns memory to the operating system once load has ended: the Go
// runtime keeps freed heap for reuse, and without new allocations it does not even
// collect it, so a server's resident size would stay at its peak.
func (s *Server) releaseMemory() {
	defer s.wg.Done()
	t := time.NewTicker(releaseTick)
	defer t.Stop()
	prev := s.budget.used.Load()
	lastTakes := bufs.takes.Load()
	lastAllocs, lastForced, _ := heapAllocs()
	releasedAt := lastAllocs
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.warns.flush(s.log, slog.LevelWarn)
		s.sweepLobby()
		if p := s.pollNow.Load(); p != nil {
			p.handOffStalled(inlineStall)
		}
		cur := s.budget.used.Load() + s.inflight.used.Load() + s.rooms.used.Load()
		peak := s.budget.peak.Load() + s.inflight.peak.Load() + s.rooms.peak.Load()
		settled := cur-prev < 1<<20 && prev-cur < 1<<20
		prev = cur
		// The buffers cached for connections that woke at once (a bring-up, a wake
		// storm) are let go of once the storm has passed: an idle server would keep
		// them, and without new allocations it would not even collect them.
		takes := bufs.takes.Load()
		calm := takes-lastTakes < releaseBusy
		lastTakes = takes
		buffers := calm && bufs.held() >= releaseBufs
		allocs, forced, live := heapAllocs()
		if forced != lastForced {
			// A collection was forced since the last tick (this janitor's release, or
			// another server's or the application's): the garbage before it is gone.
			releasedAt, lastForced = allocs, forced
		}
		garbage := (allocs-lastAllocs < releaseCalm && allocs-releasedAt >= releaseDrop) ||
			(allocs-lastAllocs < releaseQuiet && allocs-releasedAt >= max(releaseIdle, live/16))
		lastAllocs = allocs
		if (peak-cur >= releaseDrop && settled) || buffers || garbage {
			// The collection forced below resets releasedAt at the next tick.
			s.budget.peak.Store(s.budget.used.Load())
			s.inflight.peak.Store(s.inflight.used.Load())
			s.rooms.peak.Store(s.rooms.used.Load())
			s.log.Debug("rendezvous server: returning freed memory to the OS", "peak", peak, "in_use", cur, "buffers_cached", bufs.held())
			if buffers {
				bufs.drop()
			}
			debug.FreeOSMemory()
		}
	}
}

func (s *Server) accept(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(recvWindow)
	}
	c := &serverConn{s: s, remote: nc.RemoteAddr().String()}
	nc = newSock(&c.sk, nc)
	c.nc, c.raw = nc, nc
	if s.cfg.tls != nil {
		// Heard at the first byte of the TLS handshake, not of the first frame.
		c.nc = tls.Server(rawReader{nc, c}, s.cfg.tls)
	}
	s.admit(c, false)
}

// admit gives the new connection c a handshake slot, or a place in the lobby while it
// has sent nothing (not when it comes from there), or a place in the queue, or
// refuses it.
func (s *Server) admit(c *serverConn, fromLobby bool) {
	nc := c.raw
	id := clientIdentity(nc.RemoteAddr())
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	if !fromLobby && len(s.unauth) >= s.cfg.maxUnauth && s.enterLobbyLocked(c, id) {
		return // unlocked there
	}
	var evict *serverConn
	if len(s.unauth) >= s.cfg.maxUnauth {
		now := time.Now()
		evict, _ = s.evictLocked(now)
		if h := s.cfg.onEvictCheck; h != nil {
			h(now, evict)
		}
		if evict == nil {
			evict = s.evictForLocked(id, now)
		}
		if evict == nil {
			// Every slot is young or its client is being served. A host that holds
			// as many as any other waits its turn: in the queue when it holds them
			// all (a burst of its ranks), else refused at once (its client dials
			// again); either way the listener's queue moves on, so that newcomers
			// from other hosts are not kept behind it.
			if s.handsLocked(id) < len(s.unauth) || len(s.queued) >= s.cfg.maxUnauth {
				s.mu.Unlock()
				s.log.Debug("rendezvous server: connection refused: its host holds its share of the handshake slots", "remote", c.remote, "host", id)
				_ = nc.Close()
				return
			}
			s.queued = append(s.queued, c)
			if !s.admitting {
				s.admitting = true
				s.wg.Add(1)
				go s.admitQueued()
			}
			s.mu.Unlock()
			return
		}
	}
	s.giveSlotLocked(c, id)
	s.mu.Unlock()
	if evict != nil {
		evict.evicted.Store(true)
		evict.shut() // a parked one is woken to end
	}
	// A connection not heard from yet waits for its first bytes in the poller when many
	// goroutines wait on their clients already (parkUnheard): a bring-up's burst of
	// dials starts no goroutine per rank.
	if !c.reserveAwaiting() && s.cfg.beforeServe == nil && c.parkUnheard() {
		return
	}
	go c.run(c.serve, false)
}

// reserveAwaiting counts c, whose goroutine is about to start, as waiting on its
// client (Server.awaiting) until its first read counts it instead (readRaw), or it
// parks or ends (dropReservation), if fewer than maxAwaiting do: a burst of dials then
// starts at most that many goroutines, however slowly they come to their first read.
func (c *serverConn) reserveAwaiting() bool {
	s := c.s
	for {
		n := s.awaiting.Load()
		if n >= maxAwaiting {
			return false
		}
		if s.awaiting.CompareAndSwap(n, n+1) {
			s.noteAwaiting(0)
			c.reserved = true
			return true
		}
	}
}

// dropReservation ends the accept's reservation of c (reserveAwaiting) if it still
// holds one: c parks, or its goroutine ends before its first read. Only c's goroutine
// calls it.
func (c *serverConn) dropReservation() {
	if c.reserved {
		c.reserved = false
		c.s.noteAwaiting(-1)
	}
}

// startLocked gives c a handshake slot and starts its goroutine.
func (s *Server) startLocked(c *serverConn, id string) {
	s.giveSlotLocked(c, id)
	go c.run(c.serve, false)
}

// giveSlotLocked gives c a handshake slot; its goroutine, once started, ends the slot
// (s.wg).
func (s *Server) giveSlotLocked(c *serverConn, id string) {
	c.acct = &account{share: s.shareLocked(id)}
	c.acct.share.hands++
	c.since = time.Now()
	s.unauth = append(s.unauth, c)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
}

// admitQueued gives the connections in the queue (those of a host that held every
// handshake slot when they came) a slot each, in order, as slots are left or become
// evictable; it returns once the queue is empty or the server closes.
func (s *Server) admitQueued() {
	defer s.wg.Done()
	s.mu.Lock()
	for len(s.queued) > 0 && !s.closed {
		var evict *serverConn
		if len(s.unauth) >= s.cfg.maxUnauth {
			now := time.Now()
			var wait time.Duration
			evict, wait = s.evictLocked(now)
			if h := s.cfg.onEvictCheck; h != nil {
				h(now, evict)
			}
			if evict == nil {
				s.mu.Unlock()
				t := time.NewTimer(wait)
				select {
				case <-s.slotFreed:
				case <-t.C:
				case <-s.done:
				}
				t.Stop()
				s.mu.Lock()
				continue
			}
		}
		c := s.queued[0]
		s.queued[0] = nil
		s.queued = s.queued[1:]
		s.startLocked(c, clientIdentity(c.raw.RemoteAddr())) // attached while queued
		if evict != nil {
			s.mu.Unlock()
			evict.evicted.Store(true)
			evict.shut()
			s.mu.Lock()
		}
	}
	s.admitting = false
	var left []*serverConn
	if s.closed {
		left, s.queued = s.queued, nil
	}
	s.mu.Unlock()
	for _, c := range left {
		_ = c.nc.Close()
	}
}

// handsLocked is how many handshake slots the host id holds.
func (s *Server) handsLocked(id string) int {
	if a := s.clients[id]; a != nil {
		return a.hands
	}
	return 0
}

// evictForLocked makes room for a newcomer from host id when no slot is evictable
// (evictLocked): it takes the oldest slot of the host that holds the most, when that
// host holds at least two more than id, or when id holds none and that host holds
// more than one, or holds one past its grace. So a host gets its share of the slots
// whatever others do from other addresses, and a host's first handshake always gets
// one: what a host's connections do delays only that host's ranks.
func (s *Server) evictForLocked(id string, now time.Time) *serverConn {
	mine := s.handsLocked(id)
	var top *share
	for _, c := range s.unauth {
		if h := c.acct.share; h.id != id && (top == nil || h.hands > top.hands) {
			top = h
		}
	}
	if top == nil || (top.hands <= mine+1 && (mine > 0 || top.hands != 1)) {
		return nil
	}
	for i, c := range s.unauth {
		if c.acct.share != top {
			continue
		}
		if top.hands == 1 && mine == 0 && now.Sub(c.since) < handshakeGrace {
			return nil
		}
		s.takeSlotLocked(i)
		return c
	}
	return nil
}

// takeSlotLocked removes the i-th connection from the handshake slots.
func (s *Server) takeSlotLocked(i int) {
	c := s.unauth[i]
	s.unauth = append(s.unauth[:i], s.unauth[i+1:]...)
	if c.acct != nil {
		c.acct.share.hands--
	}
}

// maxIdleClients is how many clients without connections the server remembers
// before it forgets those that hold nothing.
const maxIdleClients = 4096

// shareLocked returns the share of the client id and counts a new connection of it;
// every connection, whatever protocol it speaks, has one. A client is remembered while
// it has connections or holds anything (its keys), so that its quota outlives its
// connections.
func (s *Server) shareLocked(id string) *share {
	a := s.clients[id]
	if a == nil {
		if len(s.clients) >= maxIdleClients {
			for k, v := range s.clients {
				if v.conns == 0 && v.used.Load() == 0 {
					delete(s.clients, k)
				}
			}
		}
		a = &share{b: s.budget, rooms: s.rooms, id: id, limit: s.cfg.maxClientBytes}
		s.clients[id] = a
	}
	a.conns++
	return a
}

// leaveLocked counts a closed connection of a, and forgets a when it holds nothing.
func (s *Server) leaveLocked(a *share) {
	if a.conns--; a.conns == 0 && a.used.Load() == 0 {
		delete(s.clients, a.id)
	}
}

// handshakeGrace is how long a connection holds its handshake slot before a newcomer
// may take it: long enough for a rank that dialed in a burst of thousands to be read
// and answered, short enough that connections holding slots without a handshake delay
// newcomers little.
const handshakeGrace = 100 * time.Millisecond

// evictLocked takes the connection to drop for a newcomer out of the handshake slots,
// among those that have held theirs for handshakeGrace at now: the oldest whose client
// has sent nothing (spoke) or that has held its slot for the handshake timeout, else
// the oldest whose goroutine has waited handshakeGrace for its client to send more
// (stalled: a hello and then nothing, a frame cut short). A connection whose bytes the server has yet to
// read or answer keeps its slot: thousands of ranks dialing at once on a loaded
// machine have sent their hellos before the goroutines of their connections run, and
// are not made to dial again. When no slot is evictable it returns nil and how long to
// wait before looking again: until a slot leaves its grace or a connection has waited
// on its client for it, at most handshakeGrace.
func (s *Server) evictLocked(now time.Time) (*serverConn, time.Duration) {
	stalled := -1
	wait := handshakeGrace
	for i, c := range s.unauth {
		age := now.Sub(c.since)
		if age < handshakeGrace {
			wait = min(wait, handshakeGrace-age)
			break
		}
		if age >= s.cfg.handshakeTimeout || !c.spoke() {
			stalled = i
			break
		}
		if stalled < 0 {
			if ok, left := c.stalled(); ok {
				stalled = i
			} else if left > 0 {
				wait = min(wait, left)
			}
		}
	}
	if stalled < 0 {
		return nil, wait
	}
	c := s.unauth[stalled]
	s.takeSlotLocked(stalled)
	return c, 0
}

// leaveHandshakeLocked removes c from the handshake slots; it reports whether it was
// there.
func (s *Server) leaveHandshakeLocked(c *serverConn) bool {
	for i, u := range s.unauth {
		if u == c {
			s.takeSlotLocked(i)
			select {
			case s.slotFreed <- struct{}{}:
			default:
			}
			return true
		}
	}
	return false
}

// serverConn is one client connection. Its goroutine reads and answers requests in
// order; replies to blocked requests are written later by the goroutine that made their
// keys exist.
type serverConn struct {
	s   *Server
	nc  net.Conn
	raw net.Conn // the accepted connection, under TLS when the server speaks it
	sk  sock     // raw, if the server may take over its descriptor (newSock)
	// During the handshake: since when the goroutine waits in a read from raw
	// (turns.now()+1; 0: it does not), and how many such reads returned.
	waiting atomic.Int64
	reads   atomic.Uint64
	remote  string
	br      *bufio.Reader
	small   []byte // frame buffer for frames up to smallFrame
	big     []byte // buffer of the current large frame
	bigCost int64  // what big reserved
	fields  [][]byte
	acct    *account
	since   time.Time   // when it took its handshake slot
	heard   atomic.Bool // some byte arrived
	evicted atomic.Bool // closed to make room for a newer connection
	// In the lobby (lobby.go), and taken out of it to be closed; guarded by Server.mu.
	lobby, dropped bool
	authed         bool // holds an authenticated slot
	// waited is how long, in all, the goroutine has waited on its client during the
	// handshake (ns), not counting the wait in progress.
	waited atomic.Int64
	// Of a torch connection: its state (guarded by Server.mu), when its last query was
	// answered (turns.now), and whether its slot was taken from it while it was idle
	// (guarded by Server.mu).
	torch     *torchConn
	lastQuery atomic.Int64
	slotGone  bool
	// roomed: its slot took its cost and its host's jobRoom from Server.rooms
	// (guarded by Server.mu).
	roomed bool

	turn   chan struct{} // receives the turn this connection waits for (turns)
	turnAt int64         // when its turn began (turns.now)
	readAt int64         // when its request began to arrive (turns.now)

	wmu      sync.Mutex
	out      *replies // guarded by wmu; nil while nothing is queued and parked
	writeBy  int64    // the write deadline set last (armWrite, Unix ns); guarded by the protocol's write lock
	queueing bool     // replies wait in out until flush; guarded by wmu

	gone    bool // guarded by pmu
	pmu     sync.Mutex
	pending map[uint32]func() bool // cancel of each blocked request, by id

	// Parking (park.go). step serves requests once the handshake is done (resumed:
	// on a goroutine that wake started); idleBy is when the idle timeout closes the
	// connection (zero: never), both of the serving goroutine. pollID (0: never
	// parked, -1: ended) and polled are guarded by the poller's lock. parkedAt,
	// resumed, soon and getNext (await, resume) belong to the goroutine that serves c.
	step     func(c *serverConn, resumed bool) (parked bool)
	idleBy   time.Time
	parkedAt int64 // turns.now
	parked   atomic.Bool
	resumed  bool
	soon     bool
	getNext  bool // its last request was torch's WAIT, which its client follows with a GET
	// settled counts the waits for a next request past the handshake, up to
	// newcomerWaits (await).
	settled  uint8
	polled   bool
	reserved bool // counted in Server.awaiting until its first read or park (reserveAwaiting)
	// torchGen is the generation of torch's protocol its client speaks (0: ncclgo's,
	// or not known yet); torch holds its state, nil while it hibernates. Both are
	// written under Server.mu.
	torchGen  uint8
	pollID    int32
	idleTimer *time.Timer
}

// spoke reports whether c's client has sent anything: its goroutine has read a byte,
// or bytes wait in the kernel's receive buffer (bytesWaiting; they will be read).
func (c *serverConn) spoke() bool {
	if c.heard.Load() {
		return true
	}
	if c.raw != nil && bytesWaiting(c.raw) {
		c.heard.Store(true)
		return true
	}
	return false
}

// stalled reports whether c's goroutine has waited handshakeGrace for its client to
// send more, with nothing left to read: the server has answered all it was sent (a
// hello and then nothing), or has part of a frame. A goroutine not started yet, busy,
// or about to be woken by bytes that have arrived is not stalled.
// Else, while it waits, it returns how long until it has waited handshakeGrace.
func (c *serverConn) stalled() (bool, time.Duration) {
	reads := c.reads.Load()
	since := c.waiting.Load()
	if since == 0 {
		return false, 0
	}
	// The waits add up: a client that sends a byte now and then is as stalled as one
	// that sends nothing.
	if left := int64(handshakeGrace) - c.waited.Load() - (c.s.turns.now() + 1 - since); left > 0 {
		return false, time.Duration(left)
	}
	return !bytesWaiting(c.raw) && c.reads.Load() == reads, 0
}

// readRaw reads from the accepted connection, noting during the handshake since when c
// waits on its client, and that it was heard from once a byte arrives.
func (c *serverConn) readRaw(p []byte) (int, error) {
	if pl := c.leader(); pl != nil {
		if n, err, done := readNow(c.rawConn(), p); done {
			if !c.authed {
				c.reads.Add(1)
				if n > 0 && !c.heard.Load() {
					c.heard.Store(true)
				}
			}
			return n, err
		}
		pl.handOff(c) // nothing has arrived: wait on this goroutine alone
	}
	if c.authed { // read by the connection's goroutine, which sets it
		return c.raw.Read(p)
	}
	start := c.s.turns.now() + 1
	c.waiting.Store(start)
	if c.reserved {
		c.reserved = false // the accept's reservation counts this read
	} else {
		c.s.noteAwaiting(1)
	}
	n, err := c.raw.Read(p)
	c.s.noteAwaiting(-1)
	c.reads.Add(1)
	c.waited.Add(c.s.turns.now() + 1 - start)
	c.waiting.Store(0)
	if n > 0 && !c.heard.Load() {
		c.heard.Store(true)
	}
	return n, err
}

// rawReader is the accepted connection as read by readRaw, under TLS (whose first
// frame comes after the TLS handshake).
type rawReader struct {
	net.Conn
	c *serverConn
}

func (r rawReader) Read(p []byte) (int, error) { return r.c.readRaw(p) }

// beforeRead runs on the serving goroutine before it waits for more bytes from the
// network: a torch connection writes the answers it queued.
func (c *serverConn) beforeRead() error {
	if t := c.torch; t != nil {
		return t.beforeRead()
	}
	return nil
}

// flushOut returns what writes the replies c's protocol has queued (Close calls it);
// s.mu must be held.
func (c *serverConn) flushOut() func() error {
	if t := c.torch; t != nil {
		return t.flush
	}
	return c.flush
}

// heardReader is what a connection's frames are read from: it runs beforeRead, then
// reads (readRaw, which marks the connection as heard from at its first byte).
type heardReader struct{ c *serverConn }

func (r heardReader) Read(p []byte) (int, error) {
	if err := r.c.beforeRead(); err != nil {
		return 0, err
	}
	if r.c.nc != r.c.raw { // TLS: rawReader notes the reads
		return r.c.nc.Read(p)
	}
	return r.c.readRaw(p)
}

// serve is the first step of a connection's goroutine (run): the handshake of
// either protocol, then its requests. A new connection whose client has sent nothing
// yet may first wait for its first bytes in the poller (parkUnheard); serve runs
// again once woken (resumed).
func (c *serverConn) serve(resumed bool) (parked bool) {
	s := c.s
	if resumed {
		c.step, c.idleBy = nil, time.Time{}
		c.idleTimer = nil // stopped by resume; the idle timeout makes its own
		// The bytes that woke it are the handshake's: its first request is a newcomer's
		// (await).
		c.resumed, c.soon = false, false
		c.waited.Add(s.turns.now() + 1 - c.waiting.Swap(0))
		c.putReadBuffers() // resume took them; the handshake takes its own below
		if !bytesWaiting(c.raw) {
			// Woken with nothing to read: the handshake timeout has passed, or its
			// client hung up, or it was closed.
			err := io.EOF
			if c.evicted.Load() || s.isClosed() {
				err = net.ErrClosed
			} else if time.Since(c.since) >= s.cfg.handshakeTimeout {
				err = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			}
			c.logEnd("handshake", err)
			return false
		}
	} else {
		// The accept's reservation, if any, stays counted until the first read or a
		// park (reserveAwaiting).
		if h := s.cfg.beforeServe; h != nil {
			h()
		}
		if c.parkUnheard() {
			return true
		}
	}
	c.br = bufs.reader(heardReader{c})
	if gen, err := c.sniffTorch(); err != nil || gen != 0 {
		if err != nil {
			c.logEnd("handshake", err)
			return false
		}
		return c.serveTorch(gen)
	}
	c.small = bufs.small()
	if err := c.handshake(); err != nil {
		c.logEnd("handshake", err)
		return false
	}
	c.turn = make(chan struct{}, 1)
	c.step = (*serverConn).serveFrames
	return c.serveFrames(false)
}

// parkUnheard parks c, new and not heard from yet, while maxAwaiting goroutines or
// more wait on their clients: it waits for its first bytes in the poller, holding its
// handshake slot but no goroutine, at most until its handshake timeout (its idle
// timer), and counts as a goroutine waiting since then (stalled). It reports whether
// c was parked. A bring-up of thousands of ranks that dial at once so holds a few
// dozen goroutines, not one per rank whose first bytes have not come yet.
func (c *serverConn) parkUnheard() bool {
	s := c.s
	others := s.awaiting.Load()
	if c.reserved {
		others-- // its own reservation
	}
	if !pollSupported || others < maxAwaiting || c.nc != c.raw || c.spoke() {
		return false
	}
	c.step = (*serverConn).serve
	c.idleBy = c.since.Add(s.cfg.handshakeTimeout)
	c.waiting.Store(s.turns.now() + 1)
	c.dropReservation() // it waits in the poller, not on its goroutine
	if c.park() {
		return true
	}
	c.putReadBuffers()
	c.step, c.idleBy = nil, time.Time{}
	c.waiting.Store(0)
	return false
}

// serveFrames reads and answers requests until the connection ends or is parked.
func (c *serverConn) serveFrames(resumed bool) (parked bool) {
	s := c.s
	flush := func() {
		if err := c.flush(); err != nil {
			_ = c.nc.Close() // the next read ends the loop
		}
	}
	for {
		if !resumed {
			c.idleBy = time.Time{}
			if s.cfg.idleTimeout > 0 {
				c.idleBy = time.Now().Add(s.cfg.idleTimeout)
			}
		}
		resumed = false
		s.turns.pace(c, flush)
		parked, err := c.await()
		if parked {
			return true
		}
		var f frame
		var refused error
		if err == nil {
			f, refused, err = c.readRequest()
		}
		if err != nil {
			_ = c.flush()
			c.logEnd("read", err)
			return false
		}
		if err = c.handleHeld(f, refused); err != nil {
			c.logEnd(f.op.String(), err)
			return false
		}
		if cap(c.fields) > 64 {
			c.fields = nil
		}
	}
}

// readRequest reads one frame. Its buffer grows with the bytes that arrived, each step
// reserved from the client's share and the server's budget for frames in flight; a
// frame that does not fit is read to its end and discarded, and refused says why.
func (c *serverConn) readRequest() (f frame, refused error, err error) {
	s := c.s
	if c.br.Buffered() == 0 { // else await saw the first byte arrive
		_ = c.nc.SetReadDeadline(c.idleBy)
	}
	var lb [4]byte
	if _, err := io.ReadFull(c.br, lb[:1]); err != nil {
		return frame{}, nil, err
	}
	c.readAt = s.turns.now()
	// A frame that has begun must arrive whole within the handshake timeout, so that
	// a peer cannot hold its slot by dripping bytes.
	_ = c.nc.SetReadDeadline(time.Now().Add(s.cfg.handshakeTimeout))
	if n, err := io.ReadFull(c.br, lb[1:]); err != nil {
		return frame{}, nil, truncated(err, n+1, 4)
	}
	size := int(binary.BigEndian.Uint32(lb[:]))
	switch {
	case size > MaxFrameLen:
		return frame{}, nil, fmt.Errorf("%w: frame of %d bytes exceeds the limit of %d", ErrProtocol, size, MaxFrameLen)
	case size < frameHeaderLen:
		return frame{}, nil, fmt.Errorf("%w: frame of %d bytes is shorter than its %d-byte header", ErrProtocol, size, frameHeaderLen)
	}
	var body []byte
	if size <= len(c.small) {
		body = c.small[:size]
		if got, err := io.ReadFull(c.br, body); err != nil {
			return frame{}, nil, truncated(err, got, size)
		}
	} else {
		body, refused, err = c.readBig(size)
		if err != nil {
			return frame{}, nil, err
		}
		if refused != nil {
			return frame{op: op(body[0]), status: status(body[1]), id: binary.BigEndian.Uint32(body[2:6])}, refused, nil
		}
	}
	f, err = decodeFrame(body, c.fields)
	if err != nil {
		return frame{}, nil, err
	}
	c.fields = f.fields[:0]
	return f, nil, nil
}

func (c *serverConn) readBig(size int) (body []byte, refused, err error) {
	if cap(c.big) >= size { // a buffer kept from an earlier frame
		body = c.big[:size]
		if got, err := io.ReadFull(c.br, body); err != nil {
			return nil, nil, truncated(err, got, size)
		}
		return body, nil, nil
	}
	body = c.small[:frameHeaderLen] // the header says whom to refuse
	if got, err := io.ReadFull(c.br, body); err != nil {
		return nil, nil, truncated(err, got, size)
	}
	for len(body) < size {
		chunk := min(size-len(body), readChunk)
		if cap(body)-len(body) < chunk {
			n := min(size, max(2*cap(body), len(body)+chunk))
			cost := allocSize(n)
			if refused = c.reserveBuf(cost, size); refused != nil {
				discarded, err := c.br.Discard(size - len(body))
				if err != nil {
					return nil, nil, truncated(err, len(body)+discarded, size)
				}
				return body, refused, nil
			}
			grown := make([]byte, len(body), n)
			copy(grown, body)
			body = grown
			c.releaseBig()
			c.big, c.bigCost = grown, cost
		}
		got, err := io.ReadFull(c.br, body[len(body):len(body)+chunk])
		if err != nil {
			return nil, nil, truncated(err, len(body)+got, size)
		}
		body = body[:len(body)+chunk]
	}
	return body, nil, nil
}

// reserveBuf reserves a frame buffer from the client's share and from the bytes in
// flight.
func (c *serverConn) reserveBuf(cost int64, size int) error {
	what := func() string { return fmt.Sprintf("a request of %d bytes", size) }
	if !c.s.inflight.reserve(cost) {
		return &errFull{what: what(), n: int64(size), limit: c.s.inflight.limit, used: c.s.inflight.used.Load()}
	}
	if err := c.acct.reserveFor(what, cost); err != nil {
		c.s.inflight.release(cost)
		return err
	}
	return nil
}

func (c *serverConn) releaseBig() {
	if c.big != nil {
		c.acct.release(c.bigCost)
		c.s.inflight.release(c.bigCost)
		c.big, c.bigCost = nil, 0
	}
}

// dropBig frees the large frame's buffer once its request is handled, unless it is
// small enough to keep (still reserved) for the next one.
func (c *serverConn) dropBig() {
	if cap(c.big) > readChunk {
		c.releaseBig()
	}
}

func (c *serverConn) logEnd(stage string, err error) {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		c.s.log.Debug("rendezvous server: client disconnected", "remote", c.remote)
	case c.evicted.Load():
		c.s.log.Debug("rendezvous server: connection dropped to make room for a newer one", "remote", c.remote, "stage", stage, "heard", c.heard.Load())
	case c.s.isClosed() || errors.Is(err, net.ErrClosed):
		c.s.log.Debug("rendezvous server: connection closed", "remote", c.remote, "stage", stage)
	case errors.As(err, &ne) && ne.Timeout():
		c.s.warn("rendezvous server: closing silent connection", "remote", c.remote, "stage", stage, "err", err)
	default:
		c.s.warn("rendezvous server: closing connection", "remote", c.remote, "stage", stage, "err", err)
	}
}

func (c *serverConn) close() {
	s := c.s
	c.pmu.Lock()
	c.gone = true
	cancels := c.pending
	c.pending = nil
	c.pmu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
	c.releaseBig()
	c.forget()
	c.putReadBuffers()
	s.mu.Lock()
	s.leaveHandshakeLocked(c)
	if c.authed && !c.slotGone {
		s.authed--
		c.acct.share.authed--
		c.releaseConn()
	}
	s.leaveLocked(c.acct.share)
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.nc.Close()
}

// readSmall reads one handshake frame.
func (c *serverConn) readSmall() (frame, error) {
	body, _, err := readFrame(c.br, c.small[:0], maxHandshakeFrame)
	if err != nil {
		return frame{}, err
	}
	return decodeFrame(body, c.fields)
}

func (c *serverConn) handshake() error {
	s := c.s
	_ = c.nc.SetDeadline(time.Now().Add(s.cfg.handshakeTimeout))
	f, err := c.readSmall()
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	if f.op != opHello || len(f.fields) != 3 || string(f.fields[0]) != magic || len(f.fields[1]) != 2 || len(f.fields[2]) != nonceLen {
		return fmt.Errorf("%w: expected a hello, got %s with %d fields", ErrProtocol, f.op, len(f.fields))
	}
	clientNonce := bytes.Clone(f.fields[2])
	if v := binary.BigEndian.Uint16(f.fields[1]); v != ProtocolVersion {
		msg := fmt.Sprintf("server speaks protocol version %d, client %d", ProtocolVersion, v)
		_ = c.reply(0, opHello, statusVersion, []byte(msg))
		return fmt.Errorf("%w: %s", ErrVersionMismatch, msg)
	}
	var serverNonce, serverProof []byte
	if s.cfg.token != "" {
		serverNonce = newNonce()
		serverProof = proof(s.cfg.token, serverLabel, clientNonce, serverNonce)
	} else if err := c.takeSlot(opHello); err != nil {
		return err
	}
	idle := binary.BigEndian.AppendUint32(nil, uint32(min(s.cfg.idleTimeout.Milliseconds(), math.MaxUint32)))
	version := binary.BigEndian.AppendUint16(nil, ProtocolVersion)
	if err := c.reply(0, opHello, statusOK, []byte(magic), version, serverNonce, serverProof, idle); err != nil {
		return err
	}
	if s.cfg.token != "" {
		f, err := c.readSmall()
		if err != nil {
			return fmt.Errorf("reading authentication: %w", err)
		}
		if f.op != opAuth || len(f.fields) != 1 {
			return fmt.Errorf("%w: expected authentication, got %s with %d fields", ErrProtocol, f.op, len(f.fields))
		}
		// Every proof is checked, a correct one always accepted; a client over its
		// limit of failures gets every answer late (authLimiter).
		id := c.acct.share.id
		slow := s.auth.slowdown(id)
		ok := validProof(f.fields[0], s.cfg.token, clientLabel, clientNonce, serverNonce)
		if !ok {
			s.auth.failed(id)
		}
		if slow > 0 {
			t := time.NewTimer(slow)
			select {
			case <-t.C:
			case <-s.done:
			}
			t.Stop()
		}
		if !ok {
			_ = c.reply(0, opAuth, statusUnauthorized, []byte("invalid token"))
			return fmt.Errorf("%w: the client's proof does not match the token", ErrUnauthorized)
		}
		if err := c.takeSlot(opAuth); err != nil {
			return err
		}
		if err := c.reply(0, opAuth, statusOK); err != nil {
			return err
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writeBy = 0 // no deadline now: the next write sets one
	return c.nc.SetDeadline(time.Time{})
}

// takeSlot moves c from the handshake slots to an authenticated one, or answers busy.
func (c *serverConn) takeSlot(o op) error {
	busy, err := c.claimSlot()
	if busy != "" {
		_ = c.reply(0, o, statusBusy, []byte(busy))
	}
	return err
}

// claimSlot moves c from the handshake slots to an authenticated one and charges the
// connection to its account. When there is no room it returns what to tell the client
// (busy) with the error; a connection of either protocol takes its slot this way.
func (c *serverConn) claimSlot() (busy string, err error) {
	s := c.s
	s.mu.Lock()
	// A client that proved the token may take the slot of a connection that proved
	// nothing (torch's protocol has none): those never keep it out.
	proved := c.torchGen == 0 && s.cfg.token != ""
	if s.authed >= s.cfg.maxConns {
		s.idleTorchLocked(nil, proved)
	} else if host := c.acct.share; s.cfg.maxHostConns > 0 && host.authed >= s.cfg.maxHostConns {
		s.idleTorchLocked(host, proved)
	}
	if s.authed >= s.cfg.maxConns {
		s.mu.Unlock()
		msg := "server at its limit of " + strconv.Itoa(s.cfg.maxConns) + " connections"
		s.warn("rendezvous server: connection refused: limit reached", "remote", c.remote, "limit", s.cfg.maxConns)
		return msg, fmt.Errorf("%w: %s", ErrBusy, msg)
	}
	if host := c.acct.share; s.cfg.maxHostConns > 0 && host.authed >= s.cfg.maxHostConns {
		s.mu.Unlock()
		msg := "host " + host.id + " at its limit of " + strconv.Itoa(s.cfg.maxHostConns) + " connections"
		s.warn("rendezvous server: connection refused: host at its limit", "remote", c.remote, "host", host.id, "limit", s.cfg.maxHostConns)
		return msg, fmt.Errorf("%w: %s", ErrBusy, msg)
	}
	if c.roomed = c.acct.addRoom(); !c.roomed {
		err = c.acct.reserve("a connection", connOverhead)
	}
	if err != nil {
		s.mu.Unlock()
		s.warn("rendezvous server: connection refused: memory budget exhausted", "remote", c.remote, "err", err)
		return err.Error(), fmt.Errorf("%w: %v", ErrBusy, err)
	}
	if !s.leaveHandshakeLocked(c) {
		// Evicted while authenticating; it is being closed.
		s.mu.Unlock()
		c.releaseConn()
		return "", fmt.Errorf("%w: evicted during the handshake", ErrClosed)
	}
	s.authed++
	c.acct.share.authed++
	c.authed = true
	c.lastQuery.Store(s.turns.now())
	s.mu.Unlock()
	return "", nil
}

// releaseConn gives back what c's slot reserved (claimSlot).
func (c *serverConn) releaseConn() {
	if c.roomed {
		c.acct.dropRoom()
	} else {
		c.acct.release(connOverhead)
	}
}

// idleTorchLocked makes room for a newcomer when the connection slots (of host, when
// not nil) are full: it takes the slot of the torch connection that has been idle the
// longest and closes it. For a newcomer that proved the token (proved), any torch
// connection will do, one without a wait pending first: connections that proved
// nothing never keep out one that did. For anyone else, the torch connection must
// have been idle for at least the idle timeout: a torch client sends no keepalive, so
// an idle one stays open for as long as its slot is not needed (its job may touch the
// store only at bring-up), but silent ones cannot keep newcomers out. One with a wait
// pending, or bytes to read, is not idle.
func (s *Server) idleTorchLocked(host *share, proved bool) {
	if s.cfg.idleTimeout <= 0 && !proved {
		return
	}
	now := s.turns.now()
	var victim *serverConn
	victimBusy := false
	for c := range s.conns {
		if c.torchGen == 0 || !c.authed || c.slotGone || (host != nil && c.acct.share != host) {
			continue
		}
		last := c.lastQuery.Load()
		idle := s.cfg.idleTimeout > 0 && now-last >= int64(s.cfg.idleTimeout)
		if !idle && !proved {
			continue
		}
		waiting := false
		if t := c.torch; t != nil { // nil while it hibernates: nothing pending
			t.mu.Lock()
			waiting = len(t.waits) > 0
			t.mu.Unlock()
		}
		busy := waiting
		if !proved && (busy || bytesWaiting(c.raw)) {
			continue
		}
		// The idlest, the ones without a wait or a query pending first.
		if victim == nil || (victimBusy && !busy) || (victimBusy == busy && last < victim.lastQuery.Load()) {
			victim, victimBusy = c, busy
		}
	}
	if victim == nil {
		return
	}
	victim.slotGone = true
	s.authed--
	victim.acct.share.authed--
	victim.releaseConn()
	if proved {
		s.warn("rendezvous server: closing the idlest PyTorch TCPStore connection (no token) to make room for a client with the token", "remote", victim.remote)
	} else {
		s.warn("rendezvous server: closing an idle PyTorch TCPStore connection to make room for a newcomer", "remote", victim.remote, "idle_timeout", s.cfg.idleTimeout)
	}
	victim.shut()
}

// reply writes one frame; safe from any goroutine. Large fields (values) are written
// from where they are, not copied into the frame. While the connection's goroutine
// handles requests in a turn (c.queueing), replies are queued instead, to be written
// together once the turn has ended (flush).
func (c *serverConn) reply(id uint32, o op, st status, fields ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	body := frameHeaderLen
	for _, f := range fields {
		body += 4 + len(f)
	}
	if body > MaxFrameLen || len(fields) > MaxKeysPerRequest+1 {
		return fmt.Errorf("%w: reply of %d bytes in %d fields exceeds the frame limit", ErrInvalidArgument, body, len(fields))
	}
	if c.out == nil {
		c.out = &replies{}
	}
	q := c.out
	h := q.small
	h = binary.BigEndian.AppendUint32(h, uint32(body))
	h = append(h, byte(o), byte(st))
	h = binary.BigEndian.AppendUint32(h, id)
	h = binary.BigEndian.AppendUint16(h, uint16(len(fields)))
	for _, f := range fields {
		h = binary.BigEndian.AppendUint32(h, uint32(len(f)))
		if len(f) <= 512 {
			h = append(h, f...)
			continue
		}
		q.cuts = append(q.cuts, len(h))
		q.large = append(q.large, f)
	}
	q.small = h
	q.n += 4 + body
	if c.queueing {
		return nil
	}
	return c.writeOutLocked()
}

// queued returns how many bytes of replies wait to be written; c.wmu must be held.
func (c *serverConn) queued() int {
	if c.out == nil {
		return 0
	}
	return c.out.n
}

// replies is what a connection has to write: the headers and small fields of its
// replies in one buffer, and the large fields to put in it at cuts.
type replies struct {
	small []byte
	cuts  []int
	large [][]byte
	n     int // bytes in all
	bufs  net.Buffers
}

// writeOutLocked writes the queued replies; c.wmu must be held.
func (c *serverConn) writeOutLocked() error {
	q := c.out
	if q == nil || q.n == 0 {
		return nil
	}
	bufs := q.bufs[:0]
	start := 0
	for i, cut := range q.cuts {
		bufs = append(bufs, q.small[start:cut], q.large[i])
		start = cut
	}
	bufs = append(bufs, q.small[start:])
	q.bufs = bufs
	c.armWrite()
	var err error
	if len(bufs) == 1 {
		_, err = c.write(bufs[0])
	} else {
		c.mayBlock()
		_, err = bufs.WriteTo(c.nc)
	}
	clear(q.bufs[:cap(q.bufs)])
	clear(q.large)
	q.large, q.cuts, q.n = q.large[:0], q.cuts[:0], 0
	if cap(q.small) > smallFrame {
		q.small, q.bufs = nil, nil
	} else {
		q.small = q.small[:0]
	}
	return err
}

// armWrite gives the next write at least half of writeTimeout, or closeFlushTimeout
// once the server closes. Moving a deadline updates a runtime timer, so a deadline
// still more than half of writeTimeout away is kept: a write then has between half of
// writeTimeout and all of it. The caller holds the connection's write lock.
func (c *serverConn) armWrite() {
	now := time.Now()
	select {
	case <-c.s.done:
		c.writeBy = now.Add(closeFlushTimeout).UnixNano()
	default:
		if c.writeBy-now.UnixNano() > int64(writeTimeout/2) {
			return
		}
		c.writeBy = now.Add(writeTimeout).UnixNano()
	}
	_ = c.nc.SetWriteDeadline(time.Unix(0, c.writeBy))
}

// flush writes the replies queued during turns and ends the queueing.
func (c *serverConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.queueing = false
	return c.writeOutLocked()
}

// nextBuffered reports whether the next request has arrived whole already, so that
// the replies queued may wait to be written with its own.
func (c *serverConn) nextBuffered() bool {
	if c.br.Buffered() < 4 {
		return false
	}
	lb, err := c.br.Peek(4)
	return err == nil && 4+int(binary.BigEndian.Uint32(lb)) <= c.br.Buffered()
}

// handleInTurn handles one request in a turn (see turns) and writes its reply, with
// those of the requests before it while they arrived together.
// handleHeld is handleInTurn with Server.handling held shared, released even when the
// handler panics (the serving goroutine recovers and closes the connection).
func (c *serverConn) handleHeld(f frame, refused error) error {
	c.s.handling.RLock()
	defer c.s.handling.RUnlock()
	return c.handleInTurn(f, refused)
}

func (c *serverConn) handleInTurn(f frame, refused error) (err error) {
	s := c.s
	s.turns.acquire(c)
	c.wmu.Lock()
	c.queueing = true
	c.wmu.Unlock()
	func() {
		defer s.turns.release(c)
		if refused != nil {
			err = c.fail(f, statusStoreFull, "%v", refused)
		} else {
			err = c.handle(f)
		}
	}()
	c.dropBig()
	if err == nil && c.nextBuffered() {
		c.wmu.Lock()
		n := c.queued()
		c.wmu.Unlock()
		if n < smallFrame {
			return nil
		}
	}
	if ferr := c.flush(); err == nil {
		err = ferr
	}
	return err
}

func (c *serverConn) fail(f frame, st status, format string, args ...any) error {
	return c.reply(f.id, f.op, st, fmt.Appendf(nil, format, args...))
}

// failWith answers a request with the status of err's sentinel.
func (c *serverConn) failWith(f frame, err error) error {
	st, msg := statusFailed, err.Error()
	for _, s := range []struct {
		sentinel error
		status   status
	}{{ErrStoreFull, statusStoreFull}, {ErrNotCounter, statusNotCounter}, {ErrInvalidArgument, statusInvalid}} {
		if errors.Is(err, s.sentinel) {
			// The client puts the sentinel's text back in front.
			st, msg = s.status, strings.TrimPrefix(msg, s.sentinel.Error()+": ")
			break
		}
	}
	return c.reply(f.id, f.op, st, []byte(msg))
}

func badFields(f frame) error {
	return fmt.Errorf("%w: %s with %d fields", ErrProtocol, f.op, len(f.fields))
}

// keyOK checks a key field without copying it.
func keyOK(b []byte) error {
	if len(b) == 0 || len(b) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrProtocol, len(b), MaxKeyLen)
	}
	return nil
}

func keyField(b []byte) (string, error) {
	if err := keyOK(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// keyFields copies key fields into one string, in one allocation whatever their
// number, and returns them as slices of it.
func keyFields(fs [][]byte) ([]string, error) {
	n := 0
	for _, b := range fs {
		if err := keyOK(b); err != nil {
			return nil, err
		}
		n += len(b)
	}
	var all strings.Builder
	all.Grow(n)
	for _, b := range fs {
		all.Write(b)
	}
	joined := all.String()
	keys := make([]string, len(fs))
	for i, b := range fs {
		keys[i], joined = joined[:len(b)], joined[len(b):]
	}
	return keys, nil
}

// handle answers one request. It returns an error only for a protocol violation or a
// failed write, which close the connection.
func (c *serverConn) handle(f frame) error {
	s := c.s
	if s.cfg.onRequest != nil {
		s.cfg.onRequest(f.op, f.fields)
	}
	st := s.st
	switch f.op {
	case opPing:
		return c.reply(f.id, f.op, statusOK)

	case opSet:
		if len(f.fields) != 2 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		if err := st.set(c.acct, key, bytes.Clone(f.fields[1])); err != nil {
			return c.failWith(f, err)
		}
		return c.reply(f.id, f.op, statusOK)

	case opGet:
		if len(f.fields) != 1 {
			return badFields(f)
		}
		if err := keyOK(f.fields[0]); err != nil {
			return err
		}
		if v, ok := st.get(string(f.fields[0])); ok {
			return c.reply(f.id, f.op, statusOK, v)
		}
		return c.block(f, []string{string(f.fields[0])})

	case opWait:
		if len(f.fields) == 0 || len(f.fields) > MaxKeysPerRequest {
			return badFields(f)
		}
		for _, b := range f.fields {
			if err := keyOK(b); err != nil {
				return err
			}
		}
		// Refuse a wait over its bounds before copying its keys.
		if err := st.roomToWait(c.acct, waitCost(len(f.fields), func(i int) int { return len(f.fields[i]) })); err != nil {
			return c.failWith(f, err)
		}
		keys, err := keyFields(f.fields)
		if err != nil {
			return err
		}
		return c.block(f, keys)

	case opAdd:
		if len(f.fields) != 2 || len(f.fields[1]) != 8 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		n, err := st.add(c.acct, key, int64(binary.BigEndian.Uint64(f.fields[1])))
		if err != nil {
			return c.failWith(f, err)
		}
		return c.reply(f.id, f.op, statusOK, binary.BigEndian.AppendUint64(nil, uint64(n)))

	case opCAS:
		if len(f.fields) != 2 && len(f.fields) != 3 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		var old []byte
		if len(f.fields) == 3 {
			old = f.fields[1]
			if old == nil {
				old = []byte{}
			}
		}
		cur, swapped, err := st.compareAndSet(c.acct, key, old, bytes.Clone(f.fields[len(f.fields)-1]))
		if err != nil {
			return c.failWith(f, err)
		}
		var flags byte
		if swapped {
			flags |= 1
		}
		if cur != nil {
			flags |= 2
		}
		return c.reply(f.id, f.op, statusOK, []byte{flags}, cur)

	case opDelete:
		if len(f.fields) != 1 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		var deleted byte
		if st.delete(key) {
			deleted = 1
		}
		return c.reply(f.id, f.op, statusOK, []byte{deleted})

	case opCheck:
		if len(f.fields) == 0 || len(f.fields) > MaxKeysPerRequest {
			return badFields(f)
		}
		for _, b := range f.fields {
			if err := keyOK(b); err != nil {
				return err
			}
		}
		return c.reply(f.id, f.op, statusOK, st.checkFields(f.fields))

	case opBarrier:
		if len(f.fields) != 3 || len(f.fields[1]) != 8 || len(f.fields[2]) != 8 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		rank, world := int64(binary.BigEndian.Uint64(f.fields[1])), int64(binary.BigEndian.Uint64(f.fields[2]))
		if rank < math.MinInt32 || rank > math.MaxInt32 || world < math.MinInt32 || world > math.MaxInt32 {
			return c.fail(f, statusInvalid, "%v: barrier %q: rank %d or world %d out of range", ErrInvalidArgument, key, rank, world)
		}
		return c.barrier(f, key, int(rank), int(world))

	case opBarrierState:
		if len(f.fields) != 1 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		world, flags, bitmap := encodeBarrierState(st.barrierState(key))
		return c.reply(f.id, f.op, statusOK, []byte{flags}, binary.BigEndian.AppendUint64(nil, world), bitmap)

	case opArrive: // latch.go
		return c.arrive(f)

	case opCancel:
		if len(f.fields) != 0 {
			return badFields(f)
		}
		c.pmu.Lock()
		cancel := c.pending[f.id]
		delete(c.pending, f.id)
		c.pmu.Unlock()
		if cancel != nil {
			cancel()
		}
		return nil
	}
	return fmt.Errorf("%w: unexpected %s (status %d, id %d)", ErrProtocol, f.op, f.status, f.id)
}

// addPending records the cancel of a blocked request under its id; it fails when the
// id is already pending.
func (c *serverConn) addPending(id uint32) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if _, dup := c.pending[id]; dup {
		return fmt.Errorf("%w: request id %d reused while still pending", ErrProtocol, id)
	}
	if !c.gone {
		if c.pending == nil {
			c.pending = make(map[uint32]func() bool)
		}
		c.pending[id] = func() bool { return false } // replaced once registered
	}
	return nil
}

// settle replaces the placeholder of id by cancel, or forgets id (cancel nil). It runs
// the cancel at once when the connection has gone meanwhile.
func (c *serverConn) settle(id uint32, cancel func() bool) {
	c.pmu.Lock()
	if c.gone {
		c.pmu.Unlock()
		if cancel != nil {
			cancel()
		}
		return
	}
	if cancel == nil {
		delete(c.pending, id)
	} else if _, ok := c.pending[id]; ok {
		c.pending[id] = cancel
	}
	c.pmu.Unlock()
}

// deliverer returns what the store calls, with its lock held, when a blocked request
// of c is answered: the reply is written from a goroutine of its own, so that a client
// that stops reading delays no one else.
func (c *serverConn) deliverer(id uint32, o op) func(value []byte, release func()) {
	return func(value []byte, release func()) {
		if o == opGet {
			c.deliver(id, o, release, value)
		} else {
			c.deliver(id, o, release)
		}
	}
}

// deliver writes the reply of the blocked request id from a goroutine of its own, and
// calls release once it is written.
func (c *serverConn) deliver(id uint32, o op, release func(), fields ...[]byte) {
	s := c.s
	s.deliveries.Add(1)
	go func() {
		defer s.deliveries.Done()
		defer release()
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("rendezvous server: panic while writing a reply; closing the connection", "remote", c.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				c.shut()
			}
		}()
		c.pmu.Lock()
		delete(c.pending, id)
		c.pmu.Unlock()
		if err := c.reply(id, o, statusOK, fields...); err != nil {
			s.warn("rendezvous server: closing connection: reply failed", "remote", c.remote, "op", o.String(), "err", err)
			c.shut()
		}
	}()
}

// block answers a Get or Wait whose keys all exist, or leaves it with the store until
// they do.
func (c *serverConn) block(f frame, keys []string) error {
	if err := c.addPending(f.id); err != nil {
		return err
	}
	w, v, ready, err := c.s.st.wait(c.acct, keys, f.op == opGet, c.deliverer(f.id, f.op))
	switch {
	case err != nil:
		c.settle(f.id, nil)
		return c.failWith(f, err)
	case ready:
		c.settle(f.id, nil)
		if f.op == opGet {
			return c.reply(f.id, f.op, statusOK, v)
		}
		return c.reply(f.id, f.op, statusOK)
	}
	c.settle(f.id, func() bool { return c.s.st.cancel(w) })
	return nil
}

// barrier records an arrival and answers once every rank has arrived.
func (c *serverConn) barrier(f frame, key string, rank, world int) error {
	if err := c.addPending(f.id); err != nil {
		return err
	}
	deliver := c.deliverer(f.id, f.op)
	w, done, err := c.s.st.arrive(c.acct, key, rank, world, func(release func()) { deliver(nil, release) })
	switch {
	case err != nil:
		c.settle(f.id, nil)
		return c.failWith(f, err)
	case done:
		c.settle(f.id, nil)
		return c.reply(f.id, f.op, statusOK)
	}
	c.settle(f.id, func() bool { return c.s.st.cancelArrival(w) })
	return nil
}
