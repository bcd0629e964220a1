package rendezvous

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WithMaxHostConns caps the connections of one source host: the one over it is told
// which host is at which limit, other hosts still get in, and the host gets a slot
// again once one of its connections closes (Dial waits for it). Without the option one
// host may hold every connection slot.
func TestConnectionsPerHostAreCapped(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithMaxHostConns(2))
	var first []*rawConn
	for range 2 {
		r := rawDialFrom(t, addr, 1)
		_, f := r.hello(ProtocolVersion)
		require.Equal(t, statusOK, f.status, "%q", f.fields)
		first = append(first, r)
	}
	over := rawDialFrom(t, addr, 1)
	_, f := over.hello(ProtocolVersion)
	assert.Equal(t, statusBusy, f.status)
	require.NotEmpty(t, f.fields)
	assert.Equal(t, "host 127.0.0.1 at its limit of 2 connections", string(f.fields[0]))
	assert.True(t, over.closedByPeer(), "the connection over the host's limit was not closed")

	_, f = rawDialFrom(t, addr, 2).hello(ProtocolVersion)
	assert.Equal(t, statusOK, f.status, "another host was refused: %q", f.fields)

	ctx := ctxTimeout(t, 60*time.Second)
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, addr, fromHost(1), WithLogger(discardLogger()))
		if err == nil {
			err = c.Set(ctx, "k", []byte("v"))
			_ = c.Close()
		}
		dialed <- err
	}()
	require.NoError(t, first[0].nc.Close())
	require.NoError(t, <-dialed, "the host got no slot once one of its connections closed")

	_, addr2 := startServer(t)
	for range 8 {
		_, f := rawDialFrom(t, addr2, 1).hello(ProtocolVersion)
		require.Equal(t, statusOK, f.status, "without a cap a host was refused: %q", f.fields)
	}
}
