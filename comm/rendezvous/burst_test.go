package rendezvous

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A connection holds its handshake slot for handshakeGrace before a newcomer may take
// it; among the old enough, the oldest silent one goes first, then the oldest stalled.
func TestEvictionSparesYoungHandshakes(t *testing.T) {
	s := NewServer(WithLogger(discardLogger()))
	now := time.Now()
	conn := func(age time.Duration, heard bool) *serverConn {
		c := &serverConn{s: s, since: now.Add(-age)}
		c.heard.Store(heard)
		return c
	}
	young, younger := conn(handshakeGrace/2, false), conn(handshakeGrace/4, false)
	s.unauth = []*serverConn{young, younger}
	evicted, wait := s.evictLocked(now)
	assert.Nil(t, evicted, "a connection in its grace was evicted")
	assert.Equal(t, handshakeGrace/2, wait, "the wait is until the oldest leaves its grace")
	assert.Len(t, s.unauth, 2)

	oldHeard, oldSilent := conn(3*handshakeGrace, true), conn(2*handshakeGrace, false)
	s.unauth = []*serverConn{oldHeard, oldSilent, younger}
	evicted, _ = s.evictLocked(now)
	assert.Same(t, oldSilent, evicted, "the oldest silent connection goes first")
	assert.Equal(t, []*serverConn{oldHeard, younger}, s.unauth)

	s.unauth = []*serverConn{oldHeard, young}
	evicted, wait = s.evictLocked(now)
	assert.Nil(t, evicted, "a connection being served, or a young one, was evicted")
	assert.Equal(t, handshakeGrace/2, wait, "the wait is until the next leaves its grace")

	oldHeard.waiting.Store(s.turns.now() - handshakeGrace.Nanoseconds()) // waits for its client to say more
	evicted, _ = s.evictLocked(now)
	assert.Same(t, oldHeard, evicted, "without an old silent one, the oldest stalled goes; a young silent one stays")
}

// When every handshake slot is taken by a connection that just arrived, a newcomer
// waits in the listener's queue rather than evicting one: no connection is dropped
// before its grace has passed, and the newcomer gets in once it has.
func TestBurstWaitsForHandshakeSlots(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithMaxHandshakes(1), WithHandshakeTimeout(time.Minute))
	start := time.Now()
	silent := rawDial(t, addr)
	defer silent.nc.Close()
	ctx := ctxTimeout(t, 30*time.Second)
	c, err := Dial(ctx, addr, WithLogger(discardLogger()))
	require.NoError(t, err)
	defer c.Close()
	require.True(t, silent.closedByPeer(), "the silent connection was never evicted")
	assert.GreaterOrEqual(t, time.Since(start), handshakeGrace, "a connection was evicted within its grace")
	require.NoError(t, c.Set(ctx, "k", []byte("v")))
}
