package rendezvous

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func needPoller(t *testing.T) {
	t.Helper()
	if !pollSupported {
		t.Skip("parking idle connections is implemented on Linux only")
	}
}

// parkedConns counts the server's connections that wait in the poller.
func (s *Server) parkedConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		if c.parked.Load() {
			n++
		}
	}
	return n
}

// servingGoroutines counts the goroutines that serve a connection.
func servingGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "rendezvous.(*serverConn).run(")
}

// Idle connections of both protocols, blocked requests included, hold no goroutine;
// a reply due to a parked connection reaches it, and a parked connection serves its
// next requests. Before parking, every connection kept its goroutine (the count of
// serving goroutines stayed at 6).
func TestIdleConnectionsHoldNoGoroutine(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	own, torch := clientsOfBothProtocols(t, ctx, addr)
	got := blockedGets(ctx, own[0], torch[0])
	eventually(t, "every idle connection is parked", func() bool { return s.parkedConns() == 6 })
	assert.Zero(t, servingGoroutines(), "goroutines still serve idle connections")

	require.NoError(t, own[1].Set(ctx, "k", []byte("own")))
	require.NoError(t, torch[1].Set(ctx, "t", []byte("torch")))
	assert.ElementsMatch(t, []string{"own", "torch"}, answersOf(t, ctx, got))
	stillServed(t, ctx, own, torch, "k", "own")
}

// clientsOfBothProtocols dials three clients of ncclgo's protocol and three of torch's,
// each past its first query; they are closed at cleanup.
func clientsOfBothProtocols(t *testing.T, ctx context.Context, addr string) ([]*Client, []*TCPStoreClient) {
	t.Helper()
	own := []*Client{dial(t, addr), dial(t, addr), dial(t, addr)}
	var torch []*TCPStoreClient
	for range 3 {
		tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.Close() })
		require.NoError(t, tc.Set(ctx, "hello", []byte("x"))) // past its first query
		torch = append(torch, tc)
	}
	return own, torch
}

// stillServed checks that the clients are served after waking: each of own adds 1
// to "count" in turn (the counter starts at zero), and each of torch reads want under key.
func stillServed(t *testing.T, ctx context.Context, own []*Client, torch []*TCPStoreClient, key, want string) {
	t.Helper()
	for i, c := range own {
		n, err := c.Add(ctx, "count", 1)
		require.NoError(t, err)
		assert.Equal(t, int64(i+1), n)
	}
	for _, tc := range torch {
		v, err := tc.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, want, string(v))
	}
}

// blockedGets starts a Get of "k" on own and of "t" on torch, and sends each value
// (or error) to the channel it returns once it comes.
func blockedGets(ctx context.Context, own *Client, torch *TCPStoreClient) <-chan string {
	got := make(chan string, 2)
	answer := func(v []byte, err error) {
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(v)
	}
	go func() { answer(own.Get(ctx, "k")) }()
	go func() { answer(torch.Get(ctx, "t")) }()
	return got
}

// answersOf collects the two answers of blockedGets.
func answersOf(t *testing.T, ctx context.Context, got <-chan string) []string {
	t.Helper()
	var answers []string
	for range 2 {
		select {
		case v := <-got:
			answers = append(answers, v)
		case <-ctx.Done():
			t.Fatal("a blocked get on a parked connection got no answer")
		}
	}
	return answers
}

// A parked connection is still closed by the idle timeout; one that pings is not.
func TestParkedConnectionMeetsItsIdleTimeout(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t, WithIdleTimeout(2*time.Second))
	c := dial(t, addr) // pings every third of the timeout
	silent := rawDial(t, addr)
	_, f := silent.hello(ProtocolVersion)
	require.Equal(t, statusOK, f.status)
	eventually(t, "both connections are parked", func() bool { return s.parkedConns() == 2 })
	assert.True(t, silent.closedByPeer(), "the silent parked connection was not closed")
	eventually(t, "the silent connection is gone", func() bool { return s.numConns() == 1 })
	time.Sleep(3 * time.Second) // past the timeout: the pinging client stays
	ctx := ctxTimeout(t, time.Minute)
	require.NoError(t, c.Set(ctx, "k", []byte("v")))
	assert.Equal(t, 1, s.numConns())
}

// Close ends parked connections: their clients see the store close, and no
// goroutine stays (noLeaks).
func TestCloseEndsParkedConnections(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	c := dial(t, addr)
	tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tc.Close() })
	require.NoError(t, tc.Set(ctx, "a", []byte("1")))
	blocked := make(chan error, 1)
	go func() { _, err := c.Get(context.Background(), "never"); blocked <- err }()
	eventually(t, "both connections are parked", func() bool { return s.parkedConns() == 2 })
	require.NoError(t, s.Close())
	select {
	case err := <-blocked:
		assert.ErrorIs(t, err, ErrClosed)
	case <-ctx.Done():
		t.Fatal("a get blocked on a parked connection did not end at Close")
	}
	_, err = tc.Get(ctx, "a")
	assert.Error(t, err)
}

// pollerState is the scheduling state of the poller's goroutine as a goroutine dump
// shows it ("IO wait", "syscall", ...); empty when it does not run.
func pollerState() string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "rendezvous.(*poller).run(") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n")
		_, state, _ := strings.Cut(head, "[")
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",") // "syscall, 2 minutes"
		return state
	}
	return ""
}

// The poller's goroutine waits for parked connections in Go's network poller, as a
// socket's reader does. It used to block a thread in epoll_wait, and each wake then
// cost a thread handoff: a request on a parked connection cost the server 3.1-3.4x
// the CPU of one on a busy connection (BenchmarkParkedRequestCPU), 2.1-2.4x since
// (1.35x since the poller's goroutine serves what it wakes: inline_test.go).
func TestPollerWaitsInGoNetworkPoller(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tc.Close() })
	for range 3 { // parked, woken, parked again
		require.NoError(t, tc.Set(ctx, "k", []byte("v")))
		eventually(t, "the connection is parked", func() bool { return s.parkedConns() == 1 })
		eventually(t, "the poller waits", func() bool {
			st := pollerState()
			return st == "IO wait" || st == "syscall"
		})
		assert.Equal(t, "IO wait", pollerState(), "the poller waits in a blocking system call")
		time.Sleep(parkAfter)
	}
}

// A connection woken by a request after a long silence is parked again once it is
// answered, without waiting parkAfter on its goroutine for a next request: an idle
// rank's occasional request costs no read deadline that fires and no second wake of
// its goroutine. It used to wait (waitedParks grew by one per request). Clients that
// speak again soon are served as before, and torch's get (WAIT, then GET) wakes a
// connection once.
func TestWokenConnectionParksAgainAfterItsRequest(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	const n = 8
	clients := quietClients(t, s, addr, n) // no keepalive: silent when idle
	for round := range 3 {
		eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
		time.Sleep(parkAfter + 50*time.Millisecond) // a long silence
		waited := s.waitedParks.Load()
		for _, c := range clients {
			_, err := c.Add(ctx, "count", 1)
			require.NoError(t, err)
		}
		eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
		assert.Equal(t, waited, s.waitedParks.Load(), "round %d: connections waited parkAfter before parking again", round)
	}
	// torch's get is a WAIT, then a GET: a connection woken for the WAIT parks at
	// once after it, and the GET wakes it again; both are served on the poller's
	// goroutine, and no goroutine is started for the get (one that stayed for the
	// GET took a goroutine of its own, started when the poller was handed off). It
	// used to wait parkAfter for a next request after the GET: one waited park per get.
	require.NoError(t, clients[0].Set(ctx, "g", []byte("v")))
	for round := range 2 {
		eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
		time.Sleep(parkAfter + 50*time.Millisecond)
		waited, resumed := s.waitedParks.Load(), s.resumes.Load()
		created := goroutinesCreated(t)
		for _, c := range clients {
			v, err := c.Get(ctx, "g")
			require.NoError(t, err)
			assert.Equal(t, "v", string(v))
		}
		created = goroutinesCreated(t) - created
		eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
		assert.LessOrEqual(t, s.resumes.Load()-resumed, int64(2*n), "round %d: wakes for %d gets", round, n)
		assert.Less(t, created, uint64(n/2), "round %d: goroutines started for %d gets on parked connections", round, n)
		assert.Equal(t, waited, s.waitedParks.Load(), "round %d: connections waited parkAfter after a get before parking again", round)
	}
	// A sequence of requests on each connection, woken or not.
	for i := range 5 {
		for _, c := range clients {
			v, err := c.Add(ctx, "seq", 1)
			require.NoError(t, err)
			assert.Positive(t, v, "round %d", i)
		}
	}
	v, err := clients[0].Add(ctx, "count", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(4*n), v)
	v, err = clients[0].Add(ctx, "seq", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(5*n), v)
}

// A bring-up (hundreds of ranks, each with a request or two, all within parkAfter)
// holds a few dozen goroutines at most, not one per rank: past maxAwaiting
// connections waiting on goroutines, one that has answered its request parks at
// once. Every goroutine alive at once costs its stack and read buffers while it
// waits, and its descriptor for the rest of the process's life. Before the cap, the
// server held one goroutine per connection for parkAfter after its last request
// (some 256 here).
func TestBringUpHoldsFewGoroutines(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n, dialers = 256, 16
	before := runtime.NumGoroutine()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), int64(runtime.NumGoroutine()-before)))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n; i += dialers {
				c := tsDial(t, addr) // its handshake and a PING
				c.send(tsAdd, "arrived", int64(1))
				assert.Positive(t, c.i64(), "ADD's answer")
			}
		})
	}
	wg.Wait()
	eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
	close(stop)
	<-sampled
	// The sampler and the dialers count themselves; each dialer has at most one
	// connection in its handshake or request at a time, and the poller hands itself on
	// to a new goroutine now and then.
	bound := int64(maxAwaiting + 3*dialers + 16)
	t.Logf("goroutines alive at once during a bring-up of %d connections: at most %d more than before (bound %d)", n, peak.Load(), bound)
	assert.LessOrEqual(t, peak.Load(), bound, "the bring-up held a goroutine per connection")
	assert.LessOrEqual(t, s.awaitPeak.Load(), int64(maxAwaiting+dialers), "connections waiting on goroutines at once")
}

// Past its first requests, a connection whose client keeps sending waits for the next
// request on its goroutine, however many do: the bring-up's cap (maxAwaiting) does
// not turn a steady exchange into a park and a wake per request, which costs more
// server CPU (BenchmarkParkedRequestCPU). With the cap on every connection, at most
// maxAwaiting of the 128 connections here waited at once.
func TestSteadyConnectionsWaitOnTheirGoroutines(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n = 2 * maxAwaiting
	cs := make([]*tsRaw, n)
	for i := range cs {
		cs[i] = tsDial(t, addr)
	}
	round := func() {
		for _, c := range cs {
			_, err := c.nc.Write(c.encode(tsAdd, "steady", int64(1)))
			require.NoError(t, err)
		}
		for _, c := range cs {
			require.NoError(t, c.nc.SetReadDeadline(time.Now().Add(time.Minute)))
			require.Positive(t, c.i64(), "ADD's answer")
		}
	}
	for range newcomerWaits {
		round()
	}
	s.awaitPeak.Store(0)
	round()
	eventually(t, "every connection has answered and waits", func() bool { return s.awaiting.Load()+int64(s.parkedConns()) >= n })
	t.Logf("connections waiting on their goroutines at once, past their first requests: %d of %d", s.awaitPeak.Load(), n)
	assert.Greater(t, s.awaitPeak.Load(), int64(maxAwaiting+8), "steady connections parked after each request")
}

// New connections whose clients have sent nothing yet wait for their first bytes in
// the poller, not on goroutines, once maxAwaiting goroutines wait on their clients:
// they keep their handshake slots, are served once they speak, and meet their
// handshake timeout. Before, each held a goroutine until then (220 here).
func TestSilentNewcomersHoldNoGoroutine(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t, WithHandshakeTimeout(3*time.Second), WithMaxHandshakes(512))
	const n = maxAwaiting + 156
	before := servingGoroutines()
	conns := make([]*rawConn, n)
	for i := range conns {
		conns[i] = rawDial(t, addr)
	}
	eventually(t, "every connection is accepted", func() bool { return s.numConns() == n })
	eventually(t, "past maxAwaiting, the silent connections are parked", func() bool { return s.parkedConns() >= n-maxAwaiting })
	serving := servingGoroutines() - before
	t.Logf("%d silent connections: %d goroutines serve them, %d are parked", n, serving, s.parkedConns())
	assert.LessOrEqual(t, serving, maxAwaiting+8, "a silent newcomer holds a goroutine")

	// Half of them speak: each is answered.
	for _, c := range conns[:n/2] {
		_, f := c.hello(ProtocolVersion)
		assert.Equal(t, statusOK, f.status)
	}
	// The other half stay silent: the handshake timeout closes them all.
	start := time.Now()
	for _, c := range conns[n/2:] {
		assert.True(t, c.closedByPeer(), "a silent connection was not closed")
	}
	assert.Less(t, time.Since(start), 30*time.Second)
	eventually(t, "only the connections that spoke are left", func() bool { return s.numConns() == n/2 })
}

// A burst of silent dials whose goroutines are slow to come to their first read (a
// loaded machine): the accept's reservation of each of the first maxAwaiting
// (reserveAwaiting) counts it as waiting on its goroutine until that read, so the
// rest park and no more than maxAwaiting wait on goroutines at once. Before, the
// reservation ended as the goroutine began to serve; goroutines held between that and
// their first read let newer connections take goroutines too, and
// TestSilentNewcomersHoldNoGoroutine failed 2 of 10 runs under -race and bin/cpuload
// (fewer than all but maxAwaiting ever parked).
func TestReservationCountsUntilTheFirstRead(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	gate := make(chan struct{})
	var held atomic.Int64
	hold := serverOption(func(c *serverConfig) { c.beforeServe = func() { held.Add(1); <-gate } })
	s, addr := startServer(t, WithHandshakeTimeout(time.Minute), WithMaxHandshakes(512), hold)
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)
	const extra = 20
	conns := make([]*rawConn, maxAwaiting+extra)
	for i := range conns {
		conns[i] = rawDial(t, addr)
	}
	eventually(t, "every goroutine is held before its first read", func() bool { return held.Load() == maxAwaiting+extra })
	assert.EqualValues(t, maxAwaiting, s.awaiting.Load(), "connections counted as waiting on goroutines, held before their first read")
	release()
	eventually(t, "the connections past maxAwaiting are parked", func() bool { return s.parkedConns() == extra })
	assert.EqualValues(t, maxAwaiting, s.awaiting.Load(), "connections waiting on goroutines")
	assert.LessOrEqual(t, s.awaitPeak.Load(), int64(maxAwaiting), "connections waiting on goroutines at once")
	for _, c := range []*rawConn{conns[0], conns[len(conns)-1]} { // one waits on its goroutine, one is parked
		_, f := c.hello(ProtocolVersion)
		assert.Equal(t, statusOK, f.status)
	}
}

// The waits of a bring-up's ranks for the last rank's key fire at once: a few
// goroutines answer them all, not one each. Before, each fired wait started a
// goroutine of its own (256 here), and the Go runtime keeps every goroutine
// descriptor it made.
func TestFiredWaitsAreAnsweredByFewGoroutines(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithMaxHandshakes(512))
	const n = 256
	cs := make([]*tsRaw, n)
	for i := range cs {
		cs[i] = tsDial(t, addr)
		cs[i].send(tsWait, 1, "go")
	}
	last := tsDial(t, addr)
	time.Sleep(200 * time.Millisecond) // the waits are registered (the answers below tell)
	before := goroutinesCreated(t)
	last.send(tsSet, "go", []byte("now"))
	for i, c := range cs {
		assert.EqualValues(t, tsStopWaiting, c.u8(), "wait %d", i)
	}
	created := goroutinesCreated(t) - before
	t.Logf("%d waits fired at once: %d goroutines started meanwhile", n, created)
	assert.LessOrEqual(t, created, uint64(maxAnswerers+16), "a goroutine per fired wait")
}

// A bring-up of ranks that all dial at once, each setting its key and waiting for
// every rank's (storebench's all-keys pattern), keeps at most maxAwaiting connections
// waiting on goroutines at once: a connection that parked before its first byte and
// woke for its handshake counts as new at its first request, and parks after it.
// Before, each such connection waited for its next request on a goroutine of its own.
func TestAllKeysBringUpKeepsFewConnectionsWaiting(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t, WithMaxHandshakes(1024))
	const n = 768
	ctx := ctxTimeout(t, 2*time.Minute)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("rank/", i)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
			if !assert.NoError(t, err) {
				return
			}
			defer c.Close()
			assert.NoError(t, c.Set(ctx, keys[i], []byte("up")))
			assert.NoError(t, c.Wait(ctx, keys...))
			v, err := c.Get(ctx, keys[0])
			assert.NoError(t, err)
			assert.Equal(t, "up", string(v))
		})
	}
	wg.Wait()
	t.Logf("%d ranks at once: at most %d connections waited on goroutines at once", n, s.awaitPeak.Load())
	assert.LessOrEqual(t, s.awaitPeak.Load(), int64(maxAwaiting+16), "connections waiting on goroutines at once")
}

// A torch connection parked with a wait pending lets go of its torch state once the
// wait is answered, without a wake of its own: after a bring-up's barrier or WAIT for
// every rank's key, its ranks stay silent. Before, each kept its state (about 0.4 KiB)
// until its next query.
func TestAnsweredParkedTorchConnectionsLetGoOfTheirState(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	s, addr := startServer(t)
	const n = 16
	cs := make([]*tsRaw, n)
	for i := range cs {
		cs[i] = tsDial(t, addr)
		cs[i].send(tsWait, 1, "go")
	}
	states := func(parked bool) (held int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for c := range s.conns {
			if c.torchGen != 0 && c.parked.Load() == parked && c.torch != nil && c.torch.c == c {
				held++
			}
		}
		return held
	}
	// tsDial's own connection and the waiting ones park; the waiting ones keep their state.
	eventually(t, "the waiting connections are parked with their state", func() bool { return states(true) >= n })
	last := tsDial(t, addr)
	last.send(tsSet, "go", []byte("now"))
	for i, c := range cs {
		assert.EqualValues(t, tsStopWaiting, c.u8(), "wait %d", i)
	}
	eventually(t, "the answered connections let go of their state", func() bool { return states(true) == 0 })
	for _, c := range cs { // woken, each is served with its state made anew
		c.send(tsGet, "go")
		assert.Equal(t, "now", string(c.vec()))
	}
}
