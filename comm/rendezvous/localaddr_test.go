package rendezvous

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Both clients dial from the address WithLocalAddr gives: the server counts each as
// the source host it names.
func TestWithLocalAddrDialsFromIt(t *testing.T) {
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	c, err := Dial(ctx, addr, WithLocalAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}), WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Set(ctx, "a", []byte("1")))
	tc, err := DialTCPStore(ctx, addr, WithLocalAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 4)}), WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tc.Close() })
	require.NoError(t, tc.Set(ctx, "b", []byte("2")))
	s.mu.Lock()
	defer s.mu.Unlock()
	assert.Contains(t, s.clients, "127.0.0.3")
	assert.Contains(t, s.clients, "127.0.0.4")
	assert.NotContains(t, s.clients, "127.0.0.1")
}
