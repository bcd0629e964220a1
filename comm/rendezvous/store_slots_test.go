package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Torch clients, which send no token, used to hold every connection slot of a store
// with a token as long as each queried now and then: a client with the token was
// refused ("server at its limit") 5 times of 5. A token holder takes the slot of the
// unauthenticated connection idle the longest.
func TestTokenHolderGetsInPastTorchClientsHoldingEverySlot(t *testing.T) {
	const slots = 8
	s, addr := startServer(t, WithToken(admissionToken), WithTorchClients(true), WithMaxConns(slots))
	ctx := ctxTimeout(t, time.Minute)
	var torch []*TCPStoreClient
	for i := range slots {
		tc, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()), WithLocalAddr(loopbackHost(attackHost(i))))
		require.NoError(t, err)
		t.Cleanup(func() { _ = tc.Close() })
		require.NoError(t, tc.Set(ctx, fmt.Sprint("torch", i), []byte("x")))
		torch = append(torch, tc)
	}
	s.mu.Lock()
	full := s.authed
	s.mu.Unlock()
	require.Equal(t, slots, full, "the torch clients hold every slot")
	for i := range 3 {
		for _, tc := range torch { // every torch client is busy, none idle past a timeout
			_, _ = tc.Get(ctx, "torch0")
		}
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a hang guard
		c, err := Dial(dctx, addr, WithToken(admissionToken), WithLogger(discardLogger()), fromHost(1))
		if err == nil {
			err = c.Set(dctx, "newcomer", []byte{byte(i)})
			_ = c.Close()
		}
		cancel()
		require.NoError(t, err, "token holder %d was kept out by torch clients", i+1)
		t.Logf("token holder %d got in after %v", i+1, time.Since(start).Round(time.Millisecond))
	}
}

// Token holders never take each other's slots: past the limit, one is refused.
func TestTokenHoldersDoNotEvictEachOther(t *testing.T) {
	_, addr := startServer(t, WithToken(admissionToken), WithTorchClients(true), WithMaxConns(2))
	dial(t, addr, WithToken(admissionToken), WithLogger(discardLogger()))
	dial(t, addr, WithToken(admissionToken), WithLogger(discardLogger()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := Dial(ctx, addr, WithToken(admissionToken), WithLogger(discardLogger()))
	require.Error(t, err)
}

// failPoller makes the server's poller fail to start (as epoll_create1 does when the
// process is out of descriptors) until the returned function is called.
func failPoller(t *testing.T) (restore func()) {
	t.Helper()
	prev := startPoller
	startPoller = func() (*poller, error) { return nil, fmt.Errorf("epoll_create1: %w", syscall.EMFILE) }
	restore = func() { startPoller = prev }
	t.Cleanup(restore)
	return restore
}

// A poller that failed to start used to leave a torch connection's read deadline
// 250 ms ahead: a WAIT whose key came later got EOF. And the failure latched: no
// connection was parked again once descriptors were free.
func TestPollerFailureIsRetriedAndTorchWaitsOutlastIt(t *testing.T) {
	needPoller(t)
	failing := failPoller(t)
	s, addr := startServer(t)
	restore := func() { s.mu.Lock(); defer s.mu.Unlock(); failing() } // poller() reads it under s.mu
	ctx := ctxTimeout(t, time.Minute)
	waiter, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = waiter.Close() })
	require.NoError(t, waiter.Set(ctx, "first", []byte("x")))
	setter := dial(t, addr)
	time.Sleep(2 * parkAfter) // both idle past parkAfter: parking failed
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait(ctx, "later") }()
	time.Sleep(time.Second)
	require.NoError(t, setter.Set(ctx, "later", []byte("v")))
	select {
	case err := <-waited:
		require.NoError(t, err, "a torch WAIT longer than parkAfter failed while the poller could not start")
	case <-ctx.Done():
		t.Fatal("the torch WAIT got no answer")
	}
	v, err := waiter.Get(ctx, "later")
	require.NoError(t, err)
	assert.Equal(t, "v", string(v))

	restore() // descriptors are free again: the next park starts the poller
	time.Sleep(pollRetry)
	require.NoError(t, setter.Set(ctx, "again", []byte("v")))
	_, err = waiter.Get(ctx, "again")
	require.NoError(t, err)
	eventually(t, "idle connections are parked once the poller starts", func() bool { return s.parkedConns() == 2 })
}

// A connection that parked used to keep the buffer of its last large request (up to
// 64 KiB) and its reservation from the bytes in flight: 1,024 idle connections of
// four hosts filled the budget and refused a fresh client's request.
func TestParkingReleasesTheLargeFrameBuffer(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	c := dial(t, addr)
	require.NoError(t, c.Set(ctx, "big", make([]byte, 60<<10)))
	eventually(t, "the client is parked", func() bool { return s.parkedConns() == 1 })
	assert.Zero(t, s.inflight.used.Load(), "a parked connection holds bytes in flight")
	s.mu.Lock()
	var big int
	for sc := range s.conns {
		big += cap(sc.big)
	}
	s.mu.Unlock()
	assert.Zero(t, big, "a parked connection keeps its large-frame buffer")
	v, err := c.Get(ctx, "big") // it serves large requests again
	require.NoError(t, err)
	assert.Len(t, v, 60<<10)
	require.NoError(t, c.Set(ctx, "big2", make([]byte, 60<<10)))
}

var _ = errors.Is

// heapFreeable is how much of the heap in use a collection would free now: garbage,
// and what the pools hold.
func heapFreeable() int64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before) // collects nothing
	runtime.GC()
	runtime.GC() // the pools' victim caches too
	runtime.ReadMemStats(&after)
	return int64(before.HeapInuse) - int64(after.HeapInuse)
}

// After a wake storm (every idle connection sends a request at once, then parks
// again), the read buffers the connections took used to stay in their pools: an idle
// server runs no collection, and the pools keep what they hold until two have run.
// The server's memory janitor now lets them go once the storm has passed, and
// collects what the storm left.
func TestPooledReadBuffersDoNotSurviveAWakeStorm(t *testing.T) {
	needPoller(t)
	const n = 1024 // 8 KiB of read buffers each while awake
	s, addr := startServer(t, WithMaxConns(2*n))
	ctx := ctxTimeout(t, 2*time.Minute)
	clients := make([]*TCPStoreClient, n) // no keepalive: silent when idle
	for i := range clients {
		c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()), WithLocalAddr(loopbackHost(2+i%16)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	// What the bring-up left (its clients live in this process) is not the storm's:
	// the server may serve the storm without a collection of its own.
	live := liveHeap()
	for round := range 3 {
		eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
		var wg sync.WaitGroup
		for i, c := range clients {
			wg.Go(func() { assert.NoError(t, c.Set(ctx, fmt.Sprint("k", i), []byte{byte(round)})) })
		}
		wg.Wait()
	}
	eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
	time.Sleep(6 * releaseTick) // the storm has passed; the server stays idle
	freeable := heapFreeable()
	grown := liveHeap() - live
	t.Logf("idle after the storm: heap a collection would free %d KiB, live heap grown by %d KiB; buffers cached %d", freeable>>10, grown>>10, bufs.held())
	assert.Less(t, freeable, int64(n*smallFrame), "the storm left its garbage in the heap")
	assert.Less(t, grown, int64(n*smallFrame/2), "the read buffers of the storm stay cached")
	assert.Less(t, bufs.held(), releaseBufs, "the janitor kept the buffers of the storm")
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	return int64(memStats().HeapInuse)
}
