package rendezvous

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A reply held back to go out with the reply to a pipelined request is due: Close
// writes it before it closes the connection, even when it closes between the two
// requests.
func TestCloseWritesARepliesHeldForAPipelinedRequest(t *testing.T) {
	noLeaks(t)
	var srv atomic.Pointer[Server]
	closed := make(chan error, 1)
	hook := serverOption(func(c *serverConfig) {
		c.onRequest = func(o op, fields [][]byte) {
			if o != opSet || string(fields[0]) != "first" {
				return
			}
			// Close now, while this Set is handled and the Ping sent with it waits in
			// the buffer: return once Close waits for this handler to end (a writer
			// waiting on Server.handling makes TryRLock fail), so that the connection
			// is between the two requests when Close goes on.
			s := srv.Load()
			go func() { closed <- s.Close() }()
			for s.handling.TryRLock() {
				s.handling.RUnlock()
				time.Sleep(time.Millisecond)
			}
		}
	})
	s, addr := startServer(t, hook)
	srv.Store(s)
	r := rawDial(t, addr)
	_, hello := r.hello(ProtocolVersion)
	require.Equal(t, statusOK, hello.status)

	var set, ping encoder
	set.begin(opSet, statusOK, 1)
	set.string("first")
	set.bytes([]byte("v"))
	sb, err := set.finish()
	require.NoError(t, err)
	ping.begin(opPing, statusOK, 2)
	pb, err := ping.finish()
	require.NoError(t, err)
	_, err = r.nc.Write(append(sb, pb...)) // one write: both arrive together
	require.NoError(t, err)

	f, err := r.recv()
	require.NoError(t, err, "the Set was handled: its reply must arrive before the connection closes")
	assert.Equal(t, uint32(1), f.id)
	assert.Equal(t, statusOK, f.status)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	// The Ping was not handled before Close: the connection ends, clearly.
	assert.True(t, r.closedByPeer(), "the connection is closed after the reply")
}
