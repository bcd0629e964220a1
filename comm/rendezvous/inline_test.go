package rendezvous

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	require.Equal(t, metrics.KindUint64, s[0].Value.Kind(), "runtime/metrics has no count of goroutines created")
	return s[0].Value.Uint64()
}

// quietClients dials n TCPStore clients to addr, each past its first request, and
// waits until the server has parked them all and they have been silent longer than
// parkAfter (a request then wakes its connection after a long silence).
func quietClients(t *testing.T, s *Server, addr string, n int) []*TCPStoreClient {
	t.Helper()
	ctx := ctxTimeout(t, time.Minute)
	cs := make([]*TCPStoreClient, n) // no keepalive: silent when idle
	for i := range cs {
		c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		_, err = c.Add(ctx, "count", 1)
		require.NoError(t, err)
		cs[i] = c
	}
	eventually(t, "every connection is parked", func() bool { return s.parkedConns() >= n })
	time.Sleep(parkAfter + 50*time.Millisecond)
	return cs
}

// A request on a parked connection is served on the poller's goroutine, which Go's
// network poller woke: no goroutine is started for it, and no second thread is woken
// to run one. It used to start one goroutine per wake, and the scheduler's wake of an
// idle thread for it cost more than the request (BenchmarkParkedRequestCPU: 2.0-2.2x
// the server CPU of a request on a busy connection, 1.35x since).
func TestWokenConnectionIsServedWithoutANewGoroutine(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n = 32
	cs := quietClients(t, s, addr, n)
	ctx := ctxTimeout(t, time.Minute)
	before := goroutinesCreated(t)
	for _, c := range cs { // one at a time: each wake is a batch of one
		_, err := c.Add(ctx, "count", 1)
		require.NoError(t, err)
	}
	created := goroutinesCreated(t) - before
	eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
	t.Logf("goroutines started for %d requests on parked connections: %d", n, created)
	assert.Less(t, created, uint64(n/4), "a goroutine is started per request on a parked connection")
	v, err := cs[0].Add(ctx, "count", 0)
	require.NoError(t, err)
	assert.Equal(t, int64(2*n), v)
}

// withoutStallBackstop turns off the janitor's hand-off of a poller whose goroutine
// serves one connection too long, for the rest of the test: a test of the hand-offs
// a connection makes itself before it waits.
func withoutStallBackstop(t *testing.T) {
	prev := inlineStall
	inlineStall = time.Hour
	t.Cleanup(func() { inlineStall = prev })
}

// stallAmongParked starts a server with 8 TCPStore clients and one hand-driven torch
// connection, all parked after a long silence, with the janitor's backstop off: the
// set-up of a test of the hand-offs a woken connection makes before it waits.
func stallAmongParked(t *testing.T) (*tsRaw, []*TCPStoreClient) {
	t.Helper()
	needPoller(t)
	withoutStallBackstop(t)
	s, addr := startServer(t)
	a := tsDial(t, addr)
	cs := quietClients(t, s, addr, 8)
	eventually(t, "the hand-driven connection is parked", func() bool { return s.parkedConns() == len(cs)+1 })
	return a, cs
}

// checkServedWithin makes one request on each of cs, each within d.
func checkServedWithin(t *testing.T, cs []*TCPStoreClient, d time.Duration, what string) {
	t.Helper()
	for i, c := range cs {
		ctx := ctxTimeout(t, d)
		start := time.Now()
		_, err := c.Add(ctx, "others", 1)
		require.NoError(t, err, "parked connection %d while %s (after %v)", i, what, time.Since(start))
	}
}

// A woken connection whose request has not arrived whole is served on the poller's
// goroutine until it must wait for its client: the poller then goes on with a new
// goroutine, and the other parked connections are served while that client stalls.
func TestParkedConnectionsAreServedWhileAWokenOneWaitsForItsClient(t *testing.T) {
	a, cs := stallAmongParked(t)
	q := a.encode(tsAdd, "a", int64(7))
	_, err := a.nc.Write(q[:len(q)-3]) // woken, it waits for the rest
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	checkServedWithin(t, cs, 2*time.Second, "another waits for the rest of its request")
	_, err = a.nc.Write(q[len(q)-3:])
	require.NoError(t, err)
	assert.EqualValues(t, 7, a.i64(), "the stalled connection's request")
}

// A woken connection whose client does not read its answers is served on the
// poller's goroutine until a write would wait: the poller then goes on with a new
// goroutine, and the other parked connections are served while that write waits.
func TestParkedConnectionsAreServedWhileAWokenOneWaitsToWrite(t *testing.T) {
	a, cs := stallAmongParked(t)
	ctx := ctxTimeout(t, time.Minute)
	require.NoError(t, cs[0].Set(ctx, "v", []byte(strings.Repeat("x", 500)))) // cs[0] is awake now
	// 32,768 answers of 500 bytes (16 MiB): more than the sockets hold.
	var batch []byte
	for range 32 << 10 {
		batch = append(batch, a.encode(tsGet, "v")...)
	}
	go func() { _, _ = a.nc.Write(batch) }() // never read: the server's writes fill up
	time.Sleep(500 * time.Millisecond)
	checkServedWithin(t, cs, 2*time.Second, "another waits to write 16 MiB")
}

// memStats reads the runtime's memory statistics.
func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// forcedCollections returns how many collections runtime.GC and debug.FreeOSMemory
// have forced in the process.
func forcedCollections() uint32 { return memStats().NumForcedGC }

// Connections woken one at a time (an idle rank's occasional request) take and give
// back the same few read buffers, and the server forces no collection for them while
// they come: at most one once each round has passed and the server is quiet (for the
// garbage of the wakes). The memory janitor used to run two collections after every
// 256 buffers taken, however few were in use at once (five here): 30-35 µs of the
// server's CPU per request in BenchmarkParkedRequestCPU when it ran in its window. A
// wake storm still returns its buffers (TestPooledReadBuffersDoNotSurviveAWakeStorm).
func TestConnectionsWokenOneAtATimeForceNoCollection(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n = 320
	cs := quietClients(t, s, addr, n)
	// What the bring-up allocated is released (on a loaded machine, a few ticks late).
	quietCollections(t, "the bring-up's memory is released")
	// The garbage of the bring-up (the clients' too, in this process) goes now: the
	// janitor counts what is allocated from here, and 640 requests allocate far less
	// than releaseDrop.
	debug.FreeOSMemory()
	before := forcedCollections()
	ctx := ctxTimeout(t, time.Minute)
	for round := range 2 {
		for _, c := range cs {
			_, err := c.Add(ctx, "count", 1)
			require.NoError(t, err, "round %d", round)
		}
		eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
		// Silent for parkAfter: the next round wakes each as an idle rank, which parks
		// again at once. (A client that sends again sooner waits on its goroutine
		// with its buffers; many such at once leave their buffers cached, and the
		// janitor forces a collection for them once they park.)
		time.Sleep(parkAfter + 50*time.Millisecond)
	}
	time.Sleep(3 * releaseTick)
	assert.LessOrEqual(t, forcedCollections()-before, uint32(2), "collections forced for %d requests in two rounds, one connection at a time", 2*n)
}

// The janitor returns the garbage of an idle process once releaseDrop has been
// allocated since the last forced collection, whoever forced it: after the
// application's own debug.FreeOSMemory (or another server's release) it forces none
// for the garbage that collection took.
func TestACollectionForcedElsewhereCountsAsARelease(t *testing.T) {
	startServer(t)
	garbage := func() {
		for range 2 * releaseDrop / (64 << 10) {
			sink = make([]byte, 64<<10)
		}
		sink = nil
	}
	before := quietCollections(t, "the server's start is past")
	garbage()
	eventually(t, "the janitor returns the garbage of an idle process", func() bool { return forcedCollections() > before })
	before = quietCollections(t, "the janitor's release is past")
	garbage()
	debug.FreeOSMemory() // the application's own
	before++
	time.Sleep(4 * releaseTick)
	assert.Equal(t, before, forcedCollections(), "collections forced after the application's own release")
}

// sink keeps TestACollectionForcedElsewhereCountsAsARelease's allocations on the heap.
var sink []byte

// Garbage far below releaseDrop (a wake storm of idle connections, each woken with its
// state made anew) is collected once the process goes quiet; less than releaseIdle is
// left alone. Before, an idle process kept up to releaseDrop (16 MiB) of garbage.
func TestQuietGarbageIsCollected(t *testing.T) {
	startServer(t)
	garbage := func(n uint64) {
		for range n / (4 << 10) {
			sink = make([]byte, 4<<10)
		}
		sink = nil
	}
	before := quietCollections(t, "the server's start is past")
	live := memStats().HeapAlloc // at most the live heap the janitor weighs
	garbage(max(2*releaseIdle, live/8))
	eventually(t, "the janitor collects the garbage of a quiet process", func() bool { return forcedCollections() > before })
	before = quietCollections(t, "the janitor's release is past")
	garbage(releaseIdle / 4)
	time.Sleep(4 * releaseTick)
	assert.Equal(t, before, forcedCollections(), "collections forced for less garbage than releaseIdle")
}

// quietCollections waits until no collection has been forced for three janitor ticks
// in a row, and returns how many the process has forced.
func quietCollections(t *testing.T, what string) uint32 {
	t.Helper()
	n := forcedCollections()
	eventually(t, what, func() bool {
		time.Sleep(3 * releaseTick)
		prev := n
		n = forcedCollections()
		return n == prev
	})
	return n
}

// A woken connection whose client goes on sending is served on the poller's goroutine
// for the request that woke it only: then the poller goes on with a new goroutine,
// and the other parked connections are served while that client keeps sending.
func TestParkedConnectionsAreServedWhileAWokenOneKeepsSending(t *testing.T) {
	a, cs := stallAmongParked(t)
	q := a.encode(tsAdd, "a", int64(1))
	var batch []byte
	for range 64 {
		batch = append(batch, q...)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // reads the answers until the connection closes
		buf := make([]byte, 64<<10)
		for {
			if _, err := a.nc.Read(buf); err != nil {
				return
			}
		}
	})
	wg.Go(func() { // sends ADDs, 64 at a time, until stopped
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := a.nc.Write(batch); err != nil {
				return
			}
		}
	})
	time.Sleep(200 * time.Millisecond)
	checkServedWithin(t, cs, 2*time.Second, "another's client keeps sending")
	close(stop)
	_ = a.nc.Close()
	wg.Wait()
}

// quietRaw dials n hand-driven torch connections to addr and waits until the server
// has parked them all and they have been silent longer than parkAfter.
func quietRaw(t *testing.T, s *Server, addr string, n int) []*tsRaw {
	t.Helper()
	cs := make([]*tsRaw, n)
	for i := range cs {
		cs[i] = tsDial(t, addr)
	}
	eventually(t, "every connection is parked", func() bool { return s.parkedConns() >= n })
	time.Sleep(parkAfter + 50*time.Millisecond)
	return cs
}

// addOnEach sends an ADD of i to key "k<i>" on each connection cs[i], all before
// reading any answer, then checks each answer arrives within d of its read.
func addOnEach(t *testing.T, cs []*tsRaw, d time.Duration, what string) {
	t.Helper()
	for i, c := range cs {
		_, err := c.nc.Write(c.encode(tsAdd, fmt.Sprint("k", i), int64(i)))
		require.NoError(t, err)
	}
	for i, c := range cs {
		require.NoError(t, c.nc.SetReadDeadline(time.Now().Add(d)))
		assert.EqualValues(t, i, c.i64(), "connection %d's ADD%s", i, what)
	}
}

// oneProc runs the rest of the test on one thread's worth of Go code: a goroutine
// that writes to many sockets without blocking does so before the server's poller
// runs, which then finds all their events in one batch.
func oneProc(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
}

// A wake storm (a request on every parked connection at once) is served by the
// poller's goroutine, one connection after another: no goroutine is started per
// connection. It used to start one for every connection of a batch but the last.
func TestWakeStormStartsNoGoroutinePerConnection(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n = 64
	cs := quietRaw(t, s, addr, n)
	oneProc(t)
	before := goroutinesCreated(t)
	addOnEach(t, cs, time.Minute, "")
	created := goroutinesCreated(t) - before
	t.Logf("goroutines started for a wake storm of %d connections: %d", n, created)
	assert.Less(t, created, uint64(n/4), "a goroutine is started per connection of a wake storm")
	eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
}

// A woken connection that must wait for its client in the middle of a batch hands
// the poller to a new goroutine, which serves the rest of the batch: the connections
// woken with it are answered while that client stalls.
func TestBatchIsServedOnWhenAConnectionOfItWaits(t *testing.T) {
	needPoller(t)
	withoutStallBackstop(t)
	s, addr := startServer(t)
	a := tsDial(t, addr)
	cs := quietRaw(t, s, addr, 32)
	eventually(t, "the hand-driven connection is parked", func() bool { return s.parkedConns() == len(cs)+1 })
	oneProc(t)
	q := a.encode(tsAdd, "a", int64(7))
	_, err := a.nc.Write(q[:len(q)-3]) // first in the batch, it waits for the rest
	require.NoError(t, err)
	addOnEach(t, cs, 2*time.Second, ", woken in the batch of one that waits for its client")
	_, err = a.nc.Write(q[len(q)-3:])
	require.NoError(t, err)
	assert.EqualValues(t, 7, a.i64(), "the stalled connection's request")
}

// garbagePerGetLimit is TestRequestsOnParkedConnectionsLeaveLittleGarbage's bound:
// 600 bytes per GET (440 measured: 184 before a parked torch connection let go of its
// 256-byte torch state, which each wake now makes anew, a trade of a quarter KiB per
// wake, collected once the server is quiet, for as much per idle connection for as long
// as it idles), and 900 under the race detector, whose sync.Pool drops a quarter of
// what is put in it, so that about three of the four raw system call records (rawOp,
// with its three bound functions) of each GET are made anew (311-425 bytes measured
// before the torch state). Before the free lists, a GET allocated 993 bytes without the
// race detector.
func garbagePerGetLimit() uint64 {
	if testenv.RaceEnabled {
		return 900
	}
	return 600
}

// heapAllocated returns the bytes the process has allocated on the heap in all.
func heapAllocated() uint64 { return memStats().TotalAlloc }

// A request on a parked connection leaves almost no garbage for the collection an
// idle server may never run: its read buffers and a torch connection's key buffers
// come from the server's free list and go back to it when it parks again, and its
// system calls allocate no closure. Each GET used to allocate about 0.8 KiB (new key
// buffers at every wake, a closure per read, write and epoll_ctl): after a wake storm
// of 1,024 gets the server's resident size stayed 1.4 MiB higher.
func TestRequestsOnParkedConnectionsLeaveLittleGarbage(t *testing.T) {
	needPoller(t)
	s, addr := startServer(t)
	const n = 64
	cs := quietRaw(t, s, addr, n)
	cs[0].send(tsSet, "g", []byte("v"))
	eventually(t, "every connection is parked again", func() bool { return s.parkedConns() == n })
	time.Sleep(parkAfter + 50*time.Millisecond)
	get := cs[0].encode(tsGet, "g")
	for round := range 2 { // the first round fills the free lists
		eventually(t, "every connection is parked", func() bool { return s.parkedConns() == n })
		time.Sleep(parkAfter + 50*time.Millisecond)
		before := heapAllocated()
		for i, c := range cs {
			_, err := c.nc.Write(get)
			require.NoError(t, err)
			require.Equal(t, "v", string(c.vec()), "connection %d's GET", i)
		}
		perGet := (heapAllocated() - before) / n
		t.Logf("round %d: %d bytes allocated per GET on a parked connection (the test's reads included)", round, perGet)
		if round == 1 {
			assert.Less(t, perGet, garbagePerGetLimit(), "bytes allocated per GET on a parked connection")
		}
	}
}

// A query of many keys (torch's WAIT for every rank's key, at each rank's bring-up)
// reads them into a key list from the server's free list and gives it back once it
// is answered, so that a bring-up's WAITs do not each leave their keys' buffers as
// garbage. Each WAIT for 256 keys of 32 bytes here used to allocate about 20 KiB
// (its list grown by doubling, and its ends); the all-keys bring-up of 1,024 ranks
// peaked at 18-43 MB over the server's resident size before it, 12-26 MB since.
func TestWaitsForManyKeysReuseTheirKeyLists(t *testing.T) {
	_, addr := startServer(t)
	c := tsDial(t, addr)
	const n = 256
	args := []any{n}
	for i := range n {
		k := fmt.Sprintf("rank/%027d", i) // 32 bytes
		c.send(tsSet, k, []byte("v"))
		args = append(args, k)
	}
	wait := c.encode(tsWait, args...)
	const waits = 32
	for round := range 2 { // the first round fills the free list
		before := heapAllocated()
		for range waits {
			_, err := c.nc.Write(wait)
			require.NoError(t, err)
			require.Equal(t, byte(tsStopWaiting), c.u8(), "the WAIT's answer: its keys exist")
		}
		perWait := (heapAllocated() - before) / waits
		t.Logf("round %d: %d bytes allocated per WAIT for %d keys (the test's reads included)", round, perWait, n)
		if round == 1 {
			assert.Less(t, perWait, uint64(2<<10), "bytes allocated per WAIT for %d keys", n)
		}
	}
}
