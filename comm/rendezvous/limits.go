package rendezvous

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Costs charged to the server's memory budget beyond the bytes a peer sent. They are
// upper bounds of what the Go runtime really allocates for each thing, so that what the
// budget counts is at least what the process holds.
const (
	// keyOverhead is one key's map slot, entry and allocation headers.
	keyOverhead = 160
	// watchKeyOverhead is one key of a blocked request: its copy, its slot in the
	// request and its entry in the per-key set of watchers.
	watchKeyOverhead = 256
	// watcherOverhead is a blocked request and the goroutine that writes its reply.
	watcherOverhead = 8 << 10
	// connOverhead is a connection: its goroutine's stack, its read buffer, small frame
	// buffers and its state.
	connOverhead = 24 << 10
	// barrierOverhead is a barrier's state beyond its key and its rank bitmap.
	barrierOverhead = 256
	// jobRoom is what each authenticated connection brings its host for the keys and
	// blocked requests it makes, out of the part of the budget kept for connections
	// (connRoom): a rank's bring-up (its marker, rank 0's id, the counter and state,
	// one blocked arrival) with room to spare for a few reconnections.
	jobRoom = 16 << 10
)

// connRoom is the part of a budget of limit bytes kept for maxConns connections
// (connOverhead and jobRoom each), at most a quarter of it: keys, values and requests
// beyond the rooms of their hosts' connections take only the rest, so that writers
// that fill the store still leave every connection that gets a slot its room.
func connRoom(limit int64, maxConns int) int64 {
	r := min(int64(maxConns)*(connOverhead+jobRoom), limit/4)
	if r < connOverhead+jobRoom {
		return 0
	}
	return r
}

// Bounds on blocked requests (Get, Wait, Barrier).
const (
	// maxPendingPerConn is the most blocked requests one connection may have.
	maxPendingPerConn = 1024
	// maxPendingBytes bounds what one connection's blocked requests may hold.
	maxPendingBytes = 4 << 20
	// maxPendingTotal is the most blocked requests on the whole server.
	maxPendingTotal = 64 << 10
	// maxBarrierWorld is the largest world a barrier may have.
	maxBarrierWorld = 1 << 20
)

// allocSize is an upper bound of what allocating n bytes costs the Go heap (size
// classes waste at most 1/8; large objects are rounded up to 8 KiB pages).
func allocSize(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 16:
		return 16
	case n <= 32<<10:
		return int64(n + n/8 + 16)
	default:
		return int64((n + 8<<10 - 1) &^ (8<<10 - 1))
	}
}

// budget is the one memory budget of a server: keys, values, blocked requests,
// barriers, connections and frame buffers all reserve from it.
type budget struct {
	limit int64
	whole int64 // the whole budget this is part of, for errors (0: limit)
	used  atomic.Int64
	peak  atomic.Int64 // highest used since the last release of memory to the OS
}

// reserve takes n bytes, or nothing when that would exceed the limit.
func (b *budget) reserve(n int64) bool {
	for {
		cur := b.used.Load()
		if n > 0 && cur+n > b.limit {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			for p := b.peak.Load(); cur+n > p && !b.peak.CompareAndSwap(p, cur+n); p = b.peak.Load() {
			}
			return true
		}
	}
}

func (b *budget) release(n int64) { b.used.Add(-n) }

// share is one client's part of the budget. The client is an identity, not a
// connection (see clientIdentity): every connection from it reserves from the same
// share, so opening more connections gives it no more memory, and the keys it was last
// to write stay charged to it after its connections close, so reconnecting does not
// reset its quota either.
type share struct {
	b      *budget
	id     string
	limit  int64
	used   atomic.Int64
	conns  int // connections open from it; guarded by Server.mu
	hands  int // of which hold a handshake slot; guarded by Server.mu
	authed int // of which past their handshake; guarded by Server.mu

	// room is what its connections brought from the part of the budget kept for
	// them (jobRoom each) and its charges have not used; roomUsed what they have.
	// What it reserves comes from room first, what it releases goes back there
	// first. Guarded by rmu.
	rmu            sync.Mutex
	rooms          *budget // the part of the budget kept for connections
	room, roomUsed int64

	// Guarded by turns.mu.
	waiting []*serverConn // its connections waiting for a turn
	window  int64         // the quota window spent is counted in
	spent   int64         // ns spent in turns in it
	noted   bool          // counted among the clients active in it
}

// reserve takes n bytes from the share and the server's budget.
func (a *share) reserve(what string, n int64) error {
	return a.reserveFor(func() string { return what }, n)
}

// reserveFor is reserve that says what only when it fails.
func (a *share) reserveFor(what func() string, n int64) error {
	if n <= 0 {
		a.release(-n)
		return nil
	}
	if u := a.used.Add(n); u > a.limit && a.limit < a.b.limit {
		a.used.Add(-n)
		return &errFull{what: what(), n: n, share: a.limit, used: u - n}
	}
	r := a.takeRoom(n)
	if !a.b.reserve(n - r) {
		a.used.Add(-n)
		a.giveBack(r)
		return &errFull{what: what(), n: n, limit: max(a.b.limit, a.b.whole), used: a.b.used.Load()}
	}
	return nil
}

func (a *share) release(n int64) {
	a.used.Add(-n)
	a.giveBack(n)
}

// takeRoom takes up to n bytes from the room of a's connections and says how many.
func (a *share) takeRoom(n int64) int64 {
	a.rmu.Lock()
	defer a.rmu.Unlock()
	r := min(n, a.room)
	a.room -= r
	a.roomUsed += r
	return r
}

// giveBack returns n bytes: to the room of a's connections first, then the budget.
func (a *share) giveBack(n int64) {
	a.rmu.Lock()
	r := min(n, a.roomUsed)
	a.roomUsed -= r
	a.room += r
	a.rmu.Unlock()
	a.b.release(n - r)
}

// addRoom gives a the room of a new connection, reserved from the part of the budget
// kept for connections with the connection's own cost, which a's share counts; it
// reports false, reserving nothing, when that part is full.
func (a *share) addRoom() bool {
	if a.rooms == nil || (a.used.Load()+connOverhead > a.limit && a.limit < a.b.limit) || !a.rooms.reserve(connOverhead+jobRoom) {
		return false
	}
	a.used.Add(connOverhead)
	a.rmu.Lock()
	a.room += jobRoom
	a.rmu.Unlock()
	return true
}

// dropRoom takes back the room of a connection that closes. What its charges used of
// it stays charged, now to the rest of the budget (which may go over its limit by
// that much until they are freed: the total stays within the whole budget).
func (a *share) dropRoom() {
	a.used.Add(-connOverhead)
	a.rmu.Lock()
	free := min(a.room, jobRoom)
	a.room -= free
	spent := jobRoom - free
	spent = min(spent, a.roomUsed)
	a.roomUsed -= spent
	a.rmu.Unlock()
	a.b.used.Add(spent)
	a.rooms.release(connOverhead + jobRoom)
}

// account is one connection's handle on its client's share, with the bounds of that
// connection's blocked requests.
type account struct {
	*share

	// Guarded by the store's mutex.
	pending      int   // blocked requests
	pendingBytes int64 // what they cost
}

// clientIdentity is the unit of the shares and of fair scheduling: the source host of
// a connection. An IPv4 address is one client (each loopback address too), an IPv6
// address counts by its /64 prefix (what one host is usually given), and a connection
// that is not TCP counts under its address's network. It is neither the token (every
// rank of a job proves the same one, so it tells no rank from another) nor anything a
// client declares (which a client could vary at will): a client gets more shares only
// by having more hosts.
func clientIdentity(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		if addr == nil {
			return "unknown"
		}
		return addr.Network()
	}
	if ip4 := tcp.IP.To4(); ip4 != nil {
		return ip4.String()
	}
	return tcp.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// errFull says why a reservation failed.
type errFull struct {
	what        string
	n           int64
	share, used int64 // the client's share when that was the limit, else 0
	limit       int64
}

func (e *errFull) Error() string {
	if e.share > 0 {
		return fmt.Sprintf("%s (%d bytes) would exceed this client's share of %d bytes of the server's memory budget (%d in use by it)", e.what, e.n, e.share, e.used)
	}
	return fmt.Sprintf("%s (%d bytes) would exceed the server's memory budget of %d bytes (%d in use)", e.what, e.n, e.limit, e.used)
}

func (e *errFull) Unwrap() error { return ErrStoreFull }

// authLimiter rate-limits failed authentications per client (clientIdentity: an IPv4
// address, an IPv6 /64): each may fail authFailBurst times at once, then once every
// 1/authFailRate seconds. It limits guesses, not logins: every proof is checked, and
// a correct one is always accepted. Over its limit, a client's answers, right or
// wrong, come only after authSlowdown, so that a wrong guess is not told from a right
// one before then: a client then makes at most one guess per authSlowdown on each
// handshake slot it holds, and a correct rank behind the same address still gets in.
// It tracks at most authLimiterMax clients; past that, the ones it cannot track share
// one bucket (they are slowed down together rather than let through unlimited).
type authLimiter struct {
	mu       sync.Mutex
	m        map[string]*authBucket
	overflow authBucket // of the clients not tracked
}

const (
	authFailBurst  = 10
	authFailRate   = 5.0 // per second
	authLimiterMax = 4096
	// authSlowdown is how long a client over its limit waits for every answer.
	authSlowdown = time.Second / authFailRate
)

type authBucket struct {
	tokens float64
	last   time.Time
}

// refill brings b to now.
func (b *authBucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.tokens, b.last = authFailBurst, now
	}
	b.tokens = min(authFailBurst, b.tokens+now.Sub(b.last).Seconds()*authFailRate)
	b.last = now
}

// bucket returns the bucket of client id.
func (l *authLimiter) bucket(id string, now time.Time) *authBucket {
	if l.m == nil {
		l.m = make(map[string]*authBucket)
	}
	b := l.m[id]
	if b == nil {
		if len(l.m) >= authLimiterMax {
			for k, v := range l.m { // forget clients that are back to a full bucket
				if v.tokens+now.Sub(v.last).Seconds()*authFailRate >= authFailBurst {
					delete(l.m, k)
				}
			}
		}
		if len(l.m) >= authLimiterMax {
			b = &l.overflow
		} else {
			b = &authBucket{}
			l.m[id] = b
		}
	}
	b.refill(now)
	return b
}

// slowdown reports how long the answer to a proof from client id must wait: 0 while
// the client is within its limit, authSlowdown once it is over.
func (l *authLimiter) slowdown(id string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bucket(id, time.Now()).tokens >= 1 {
		return 0
	}
	return authSlowdown
}

// failed records a failed proof from client id.
func (l *authLimiter) failed(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The tokens go below zero (down to -authFailBurst), so that failures that came
	// late still count: a client over its limit stays over it while it keeps failing.
	b := l.bucket(id, time.Now())
	b.tokens = max(-authFailBurst, b.tokens-1)
}

// warnLimiter rate-limits repeated log lines: each message may be logged warnBurst
// times at once, then once per warnEvery; the next line logged says how many were
// suppressed in between.
type warnLimiter struct {
	mu sync.Mutex
	m  map[string]*warnState
}

const (
	warnBurst = 10
	warnEvery = time.Second
)

type warnState struct {
	tokens     float64
	last       time.Time
	suppressed int
}

func (w *warnLimiter) log(l *slog.Logger, level slog.Level, msg string, args ...any) {
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]*warnState)
	}
	now := time.Now()
	st := w.m[msg]
	if st == nil {
		st = &warnState{tokens: warnBurst, last: now}
		w.m[msg] = st
	}
	st.tokens = min(warnBurst, st.tokens+float64(now.Sub(st.last))/float64(warnEvery))
	st.last = now
	if st.tokens < 1 {
		st.suppressed++
		w.mu.Unlock()
		return
	}
	st.tokens--
	suppressed := st.suppressed
	st.suppressed = 0
	w.mu.Unlock()
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	l.Log(context.Background(), level, msg, args...)
}

// flush logs, for each message whose repeats were suppressed and that may be logged
// again, how many were.
func (w *warnLimiter) flush(l *slog.Logger, level slog.Level) {
	type pending struct {
		msg string
		n   int
	}
	var out []pending
	w.mu.Lock()
	now := time.Now()
	for msg, st := range w.m {
		st.tokens = min(warnBurst, st.tokens+float64(now.Sub(st.last))/float64(warnEvery))
		st.last = now
		if st.suppressed > 0 && st.tokens >= 1 {
			st.tokens--
			out = append(out, pending{msg, st.suppressed})
			st.suppressed = 0
		}
	}
	w.mu.Unlock()
	for _, p := range out {
		l.Log(context.Background(), level, p.msg+" (repeats suppressed)", "suppressed", p.n)
	}
}
