package rendezvous

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A torch client's keys count against its own share of the one memory budget: once
// the share is full its connection is closed (torch's protocol has no error reply),
// the write that did not fit changed nothing, and other clients still have theirs.
func TestTorchClientKeysCountAgainstItsShare(t *testing.T) {
	noLeaks(t)
	const share, value = 2 << 20, 256 << 10
	_, addr := startServer(t, WithMaxStoreBytes(16<<20), WithMaxClientBytes(share))
	ctx := ctxTimeout(t, 60*time.Second)
	tc, err := DialTCPStore(ctx, addr, WithTorchProtocol(TorchProtocol2), WithLogger(discardLogger()))
	require.NoError(t, err)
	defer tc.Close()
	const tries = 32 // 8 MiB: within the budget, four times the share
	keys := make([]string, tries)
	var failed error
	for i := range keys {
		keys[i] = "t/" + strconv.Itoa(i)
		if failed == nil {
			// SET has no reply: a refused one shows in the calls after it.
			failed = tc.Set(ctx, keys[i], bytes.Repeat([]byte{'x'}, value))
			if failed == nil {
				_, failed = tc.Check(ctx, keys[i])
			}
		}
	}
	require.Error(t, failed, "%d values of %d bytes were all stored within a share of %d", tries, value, share)

	nc := dial(t, addr, fromHost(2)) // another host: a share of its own
	present, err := nc.Check(ctx, keys...)
	require.NoError(t, err)
	n := 0
	for n < len(present) && present[n] {
		n++
	}
	assert.Less(t, n, share/value, "the torch client stored more than its share")
	assert.Positive(t, n)
	for i := n; i < len(present); i++ {
		assert.False(t, present[i], "key %q stored after a refused one", keys[i])
	}
	require.NoError(t, nc.Set(ctx, "ncclgo", bytes.Repeat([]byte{'y'}, share/4)), "another client's share is its own")
}

// Torch connections take their slot like ncclgo's: one of WithMaxConns once their
// first query has come, so that a torch client and an ncclgo client cannot both hold
// the only slot, and it is free again once the torch client leaves.
func TestTorchConnectionsTakeConnectionSlots(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithMaxConns(1))
	ctx := ctxTimeout(t, 60*time.Second)
	tc, err := DialTCPStore(ctx, addr, WithTorchProtocol(TorchProtocol2), WithLogger(discardLogger()))
	require.NoError(t, err)
	require.NoError(t, tc.Set(ctx, "k", []byte("v")))

	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = Dial(short, addr, WithLogger(discardLogger()))
	cancel()
	require.Error(t, err, "an ncclgo client got the slot a torch client holds")

	require.NoError(t, tc.Close())
	nc := dial(t, addr) // Dial retries while the server is busy
	v, err := nc.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "v", string(v))

	short, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = DialTCPStore(short, addr, WithTorchProtocol(TorchProtocol2), WithLogger(discardLogger()))
	require.Error(t, err, "a torch client got the slot an ncclgo client holds")
}

// A torch connection whose first query has not arrived whole is in a handshake slot:
// newcomers evict it when the slots are full, and the handshake timeout closes it.
func TestTorchConnectionsInHandshakeSlots(t *testing.T) {
	noLeaks(t)
	// A handshake timeout longer than closedByPeer waits: only eviction closes in time.
	s, addr := startServer(t, WithMaxHandshakes(2), WithHandshakeTimeout(time.Minute))
	// Generation 2's VALIDATE, cut short: sniffed as torch, never a whole query.
	partial := []byte{0, 0xCE, 0xF7, 0x85}
	var drips []*rawConn
	for range 2 {
		r := rawDial(t, addr)
		_, err := r.nc.Write(partial)
		require.NoError(t, err)
		drips = append(drips, r)
	}
	eventually(t, "the server read both connections' first bytes", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.unauth) == 2 && s.unauth[0].heard.Load() && s.unauth[1].heard.Load()
	})
	nc := dial(t, addr) // evicts the oldest of the two
	assert.True(t, drips[0].closedByPeer(), "the oldest torch connection in its handshake was not evicted")
	ctx := ctxTimeout(t, 30*time.Second)
	require.NoError(t, nc.Set(ctx, "k", nil))

	_, addr = startServer(t, WithHandshakeTimeout(200*time.Millisecond))
	r := rawDial(t, addr)
	_, err := r.nc.Write(partial)
	require.NoError(t, err)
	assert.True(t, r.closedByPeer(), "a first query that never ends was not timed out")
}

// After a whole query, a torch connection may stay silent past the handshake and idle
// timeouts (torch's clients send no keepalive), but a query it has begun must end
// within the handshake timeout.
func TestTorchQueryMustArriveWhole(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithHandshakeTimeout(200*time.Millisecond), WithIdleTimeout(3*time.Second))
	ctx := ctxTimeout(t, 60*time.Second)
	tc, err := DialTCPStore(ctx, addr, WithTorchProtocol(TorchProtocol2), WithLogger(discardLogger()))
	require.NoError(t, err)
	defer tc.Close()
	time.Sleep(4 * time.Second) // past both timeouts: no timing margin, it must not close
	require.NoError(t, tc.Set(ctx, "k", []byte("v")))
	_, err = tc.Get(ctx, "k")
	require.NoError(t, err)

	r := rawDial(t, addr)
	_, err = r.nc.Write([]byte{0, 0xCE, 0xF7, 0x85, 0x3C, byte(tsSet), 1}) // VALIDATE; SET begun
	require.NoError(t, err)
	assert.True(t, r.closedByPeer(), "a query begun and never ended was not timed out")
}

// MULTI_GET answers every value in order, small and large (written from where the
// store holds them), with the values an ncclgo client stored.
func TestTorchMultiGet(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 30*time.Second)
	nc := dial(t, addr)
	vals := [][]byte{[]byte("small"), bytes.Repeat([]byte{'L'}, 100<<10), {}, bytes.Repeat([]byte{'m'}, 513), []byte("end")}
	var q tsWriter
	q.u8(byte(tsValidate))
	q.u32(tsMagic)
	q.u8(byte(tsMultiGet))
	q.u64(uint64(len(vals)))
	var want tsWriter
	for i, v := range vals {
		k := "mg/" + strconv.Itoa(i)
		require.NoError(t, nc.Set(ctx, k, v))
		q.str("/" + k)
		want.vec(v)
	}
	r := rawDial(t, addr)
	_, err := r.nc.Write(q.bytes())
	require.NoError(t, err)
	_ = r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len(want.bytes()))
	_, err = io.ReadFull(r.nc, got)
	require.NoError(t, err)
	assert.Equal(t, want.bytes(), got)
}

// Silent torch connections hold their slots only while no one needs them: once the
// slots are full, a newcomer takes the slot of one idle for the idle timeout (torch's
// clients send no keepalive, so an idle one is not closed otherwise). They used to
// hold every slot for as long as they stayed open.
func TestIdleTorchConnectionsMakeRoomForNewcomers(t *testing.T) {
	noLeaks(t)
	const slots = 3
	_, addr := startServer(t, WithMaxConns(slots), WithIdleTimeout(300*time.Millisecond))
	ctx := ctxTimeout(t, 60*time.Second)
	var silent []*TCPStoreClient
	for i := range slots {
		tc, err := DialTCPStore(ctx, addr, WithTorchProtocol(TorchProtocol2), WithLogger(discardLogger()))
		require.NoError(t, err)
		defer tc.Close()
		require.NoError(t, tc.Set(ctx, "silent/"+strconv.Itoa(i), []byte("x")))
		silent = append(silent, tc)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := Dial(short, addr, WithLogger(discardLogger())) // retries while busy
	require.NoError(t, err, "silent torch connections kept a newcomer out")
	defer c.Close()
	require.NoError(t, c.Set(ctx, "k", []byte("v")))
	closed := 0
	for _, tc := range silent {
		if _, err := tc.Check(ctx, "k"); err != nil {
			closed++
		}
	}
	assert.Equal(t, 1, closed, "idle torch connections closed for one newcomer")
}
