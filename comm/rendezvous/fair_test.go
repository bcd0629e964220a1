package rendezvous

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fillShare sets values of size under prefix through c until the store refuses one,
// and returns how many it stored and the refusal.
func fillShare(t *testing.T, c *Client, prefix string, size int) (stored int, refused error) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	value := make([]byte, size)
	for i := 0; i < 1000; i++ {
		if err := c.Set(ctx, prefix+strconv.Itoa(i), value); err != nil {
			return stored, err
		}
		stored++
	}
	t.Fatalf("1000 values of %d bytes stored under %q without a refusal", size, prefix)
	return
}

// Many connections from one host are one client: together they hold no more than
// one share, and a client on another host still has all of its own.
func TestManyConnectionsFromOneHostShareOneShare(t *testing.T) {
	noLeaks(t)
	const budget, share, value = 16 << 20, 1 << 20, 64 << 10
	_, addr := startServer(t, WithMaxStoreBytes(budget), WithMaxClientBytes(share))
	conns := make([]*Client, 8)
	for i := range conns { // all connected first: their connections count too
		conns[i] = dial(t, addr, fromHost(2))
	}
	total := 0
	for i, c := range conns {
		n, err := fillShare(t, c, "hog/"+strconv.Itoa(i)+"/", value)
		require.ErrorIs(t, err, ErrStoreFull)
		assert.Contains(t, err.Error(), "this client's share of 1048576 bytes")
		total += n
	}
	t.Logf("8 connections from one host stored %d values of %d bytes (share %d)", total, value, share)
	assert.LessOrEqual(t, total*value, share, "the connections of one host held more than its share")
	assert.Positive(t, total)

	ctx := ctxTimeout(t, 60*time.Second)
	legit := dial(t, addr) // 127.0.0.1
	n, err := fillShare(t, legit, "legit/", value)
	require.ErrorIs(t, err, ErrStoreFull)
	assert.GreaterOrEqual(t, n, total, "the client on another host got a whole share")
	_, err = legit.Delete(ctx, "legit/0")
	require.NoError(t, err)
	require.NoError(t, legit.Barrier(ctx, GenerationKey("fair", 0, "b"), 0, 1))
}

// The keys a host wrote stay charged to it after its connections close: connecting
// again does not give it a new share, and deleting its keys (by anyone) frees it.
func TestKeysStayChargedToTheirHostAfterItDisconnects(t *testing.T) {
	noLeaks(t)
	const share, value = 1 << 20, 64 << 10
	s, addr := startServer(t, WithMaxStoreBytes(16<<20), WithMaxClientBytes(share))
	ctx := ctxTimeout(t, 60*time.Second)
	first, err := Dial(ctx, addr, fromHost(2))
	require.NoError(t, err)
	n, err := fillShare(t, first, "k/", value)
	require.ErrorIs(t, err, ErrStoreFull)
	require.NoError(t, first.Close())
	eventually(t, "the connection is gone", func() bool { return s.numConns() == 0 })

	again := dial(t, addr, fromHost(2))
	err = again.Set(ctx, "k/more", make([]byte, value))
	require.ErrorIs(t, err, ErrStoreFull, "reconnecting reset the host's quota")
	assert.Contains(t, err.Error(), "this client's share")

	// Another host deletes two of the keys: the first host has room for one again.
	other := dial(t, addr, fromHost(3))
	for _, k := range []string{"k/0", "k/1"} {
		ok, err := other.Delete(ctx, k)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.NoError(t, again.Set(ctx, "k/more", make([]byte, value)))
	present, err := other.Check(ctx, "k/"+strconv.Itoa(n-1), "k/more")
	require.NoError(t, err)
	assert.Equal(t, []bool{true, true}, present, "the keys outlived their writer's connection")
}

func TestClientIdentity(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 6}, "127.0.0.2"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:aaaa::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:bbbb::9"), Port: 2}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 2}, "10.0.0.1"},
		{&net.UnixAddr{Name: "/tmp/x", Net: "unix"}, "unix"},
		{nil, "unknown"},
	} {
		assert.Equal(t, tt.want, clientIdentity(tt.addr), "%v", tt.addr)
	}
}
