package rendezvous

import (
	"context"
	"runtime"
	"strings"
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
	own := []*Client{dial(t, addr), dial(t, addr), dial(t, addr)}
	var torch []*TCPStoreClient
	for range 3 {
		tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.Close() })
		require.NoError(t, tc.Set(ctx, "hello", []byte("x"))) // past its first query
		torch = append(torch, tc)
	}
	got := make(chan string, 2)
	go func() {
		v, err := own[0].Get(ctx, "k")
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(v)
	}()
	go func() {
		v, err := torch[0].Get(ctx, "t")
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(v)
	}()
	eventually(t, "every idle connection is parked", func() bool { return s.parkedConns() == 6 })
	assert.Zero(t, servingGoroutines(), "goroutines still serve idle connections")

	require.NoError(t, own[1].Set(ctx, "k", []byte("own")))
	require.NoError(t, torch[1].Set(ctx, "t", []byte("torch")))
	var answers []string
	for range 2 {
		select {
		case v := <-got:
			answers = append(answers, v)
		case <-ctx.Done():
			t.Fatal("a blocked get on a parked connection got no answer")
		}
	}
	assert.ElementsMatch(t, []string{"own", "torch"}, answers)
	for i, c := range own {
		n, err := c.Add(ctx, "count", 1)
		require.NoError(t, err)
		assert.Equal(t, int64(i+1), n)
	}
	for _, tc := range torch {
		v, err := tc.Get(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, "own", string(v))
	}
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
