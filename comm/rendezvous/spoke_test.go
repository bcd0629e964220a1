package rendezvous

import (
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sentHello sends a hello on r and does not read the reply.
func (r *rawConn) sentHello() *rawConn {
	r.send(opHello, 0, []byte(magic), []byte{byte(ProtocolVersion >> 8), byte(ProtocolVersion)}, newNonce())
	return r
}

func needPeek(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("telling unread bytes in the kernel's buffer (bytesWaiting) is implemented on Linux only")
	}
}

// A client whose hello waits unread in the kernel's buffer has spoken and is not
// stalled: eviction spares it however old its slot, and takes a silent one, one past
// the handshake timeout, or one whose goroutine waits for more with nothing to read.
func TestEvictionSparesClientsThatSpoke(t *testing.T) {
	needPeek(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	s := NewServer(WithLogger(discardLogger()), WithHandshakeTimeout(time.Minute))
	now := time.Now()
	conn := func(age time.Duration, hello bool) *serverConn {
		r := rawDial(t, l.Addr().String())
		nc, err := l.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { _ = nc.Close() })
		if hello {
			r.sentHello()
			eventually(t, "the hello reached the server's kernel", func() bool { return bytesWaiting(nc) })
		}
		return &serverConn{s: s, nc: nc, raw: nc, since: now.Add(-age)}
	}
	a, b := conn(3*handshakeGrace, true), conn(2*handshakeGrace, true)
	s.unauth = []*serverConn{a, b}
	evicted, wait := s.evictLocked(now)
	assert.Nil(t, evicted, "a client that sent its hello was evicted")
	assert.Equal(t, handshakeGrace, wait)
	assert.Equal(t, []*serverConn{a, b}, s.unauth)
	assert.True(t, a.heard.Load() && b.heard.Load(), "the hellos waiting did not count as heard")

	silent := conn(handshakeGrace, false)
	s.unauth = []*serverConn{a, b, silent}
	evicted, _ = s.evictLocked(now)
	assert.Same(t, silent, evicted, "the silent connection was not evicted")
	assert.Equal(t, []*serverConn{a, b}, s.unauth)

	stuck := conn(time.Minute, true)
	s.unauth = []*serverConn{stuck, a, b}
	evicted, _ = s.evictLocked(now)
	assert.Same(t, stuck, evicted, "a connection past the handshake timeout was not evicted")

	// Its goroutine waits for more, but a hello waits to be read: not stalled.
	a.waiting.Store(s.turns.now() - 2*handshakeGrace.Nanoseconds())
	s.unauth = []*serverConn{a, b}
	evicted, _ = s.evictLocked(now)
	assert.Nil(t, evicted, "a connection with bytes to read was evicted")
	drained := conn(2*handshakeGrace, false) // heard, all read, waits for more
	drained.heard.Store(true)
	drained.waiting.Store(s.turns.now() - handshakeGrace.Nanoseconds())
	s.unauth = []*serverConn{drained}
	evicted, _ = s.evictLocked(now)
	assert.Same(t, drained, evicted, "a stalled connection was not evicted")
	drained.waiting.Store(s.turns.now() + 1) // its client was just answered
	s.unauth = []*serverConn{drained}
	evicted, _ = s.evictLocked(now)
	assert.Nil(t, evicted, "a connection that waits on its client since less than the grace was evicted")
	drained.waiting.Store(s.turns.now() - handshakeGrace.Nanoseconds())
	s.unauth = []*serverConn{a, drained, b}
	evicted, _ = s.evictLocked(now)
	assert.Same(t, drained, evicted, "a stalled connection was not evicted")
}

// Clients dial in a burst with the handshake slots full and the server's goroutines
// held back before reading: once past the grace, a newcomer takes the slot of the
// silent connection only; the clients whose hellos wait unread keep theirs and are
// all answered once the goroutines run.
func TestBurstOfHellosNotEvicted(t *testing.T) {
	needPeek(t)
	noLeaks(t)
	const slots = 4
	gate := make(chan struct{})
	var mu sync.Mutex
	var victims []string
	var since time.Time // when the last slot was taken
	checked := make(chan struct{})
	var once sync.Once
	hooks := serverOption(func(c *serverConfig) {
		c.beforeServe = func() { <-gate }
		c.onEvictCheck = func(now time.Time, victim *serverConn) {
			mu.Lock()
			defer mu.Unlock()
			if victim != nil {
				victims = append(victims, victim.remote)
			}
			if !since.IsZero() && now.Sub(since) >= handshakeGrace {
				once.Do(func() { close(checked) })
			}
		}
	})
	s, addr := startServer(t, WithMaxHandshakes(slots), WithHandshakeTimeout(time.Minute), hooks)
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)

	var hellos []*rawConn
	var silent *rawConn
	for i := range slots {
		r := rawDial(t, addr)
		if i == 1 {
			silent = r
		} else {
			hellos = append(hellos, r.sentHello())
		}
		eventually(t, "the connection took a handshake slot", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.unauth) == i+1
		})
	}
	eventually(t, "the hellos reached the server's kernel", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for _, c := range s.unauth {
			if bytesWaiting(c.raw) {
				n++
			}
		}
		return n == slots-1
	})
	s.mu.Lock()
	mu.Lock()
	since = s.unauth[slots-1].since
	mu.Unlock()
	s.mu.Unlock()
	for range 3 { // newcomers, in the listener's queue
		hellos = append(hellos, rawDial(t, addr).sentHello())
	}
	select {
	case <-checked:
	case <-time.After(60 * time.Second):
		t.Fatal("the server never looked for a slot to free")
	}
	mu.Lock()
	got := append([]string(nil), victims...)
	mu.Unlock()
	assert.Equal(t, []string{silent.nc.LocalAddr().String()}, got, "evicted: want the silent connection only")
	release()
	assert.True(t, silent.closedByPeer(), "the silent connection was not evicted")
	for i, r := range hellos {
		f, err := r.recv()
		require.NoError(t, err, "client %d got no answer to its hello", i)
		assert.Equal(t, statusOK, f.status, "client %d", i)
	}
	mu.Lock()
	assert.Len(t, victims, 1, "connections evicted")
	mu.Unlock()
}
