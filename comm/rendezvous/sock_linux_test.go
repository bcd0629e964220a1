//go:build linux

package rendezvous

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// socks returns a sock around the server's end of a loopback connection, and the
// client's end.
func socks(t *testing.T) (*sock, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	nc, err := l.Accept()
	require.NoError(t, err)
	k, ok := asSock(newSock(new(sock), nc))
	require.True(t, ok, "a TCP connection is wrapped")
	t.Cleanup(func() { _ = k.Close() })
	return k, client
}

// A detached sock reads and writes its descriptor, takes a Go connection again when
// it must wait (under the deadlines set meanwhile), and closes its descriptor; no
// descriptor is left open.
func TestSockDetachesAndAttaches(t *testing.T) {
	fds := openFDs(t)
	k, client := socks(t)
	require.True(t, k.detach())
	assert.True(t, k.detached())
	assert.False(t, k.detach(), "detached twice")
	assert.Nil(t, k.RemoteAddr())

	// Bytes that have arrived are read straight from the descriptor.
	_, err := client.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	var n int
	require.Eventually(t, func() bool {
		n, err = k.Read(buf)
		return n > 0 || err != nil
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(buf[:n]))
	assert.True(t, k.detached(), "a read that did not wait attached the sock")
	_, err = k.Write([]byte("pong"))
	require.NoError(t, err)
	assert.True(t, k.detached(), "a write that did not wait attached the sock")
	got := make([]byte, 4)
	_, err = io.ReadFull(client, got)
	require.NoError(t, err)
	assert.Equal(t, "pong", string(got))

	// A read deadline set while detached holds once the read waits.
	require.NoError(t, k.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	start := time.Now()
	_, err = k.Read(buf)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.False(t, k.detached(), "a read that waited did not attach")
	_, err = k.Read(buf) // the deadline has passed: at once
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)

	// Attached again, a read waits in Go's network poller for the client.
	require.NoError(t, k.SetReadDeadline(time.Time{}))
	go func() { time.Sleep(20 * time.Millisecond); _, _ = client.Write([]byte("late")) }()
	n, err = k.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "late", string(buf[:n]))

	// Detached again, then closed: the client sees the end, and Close is not repeated.
	require.True(t, k.detach())
	require.NoError(t, k.Close())
	assert.ErrorIs(t, k.Close(), net.ErrClosed)
	_, err = k.Read(buf)
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.ErrorIs(t, k.raw().Control(func(uintptr) {}), net.ErrClosed)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = client.Read(buf)
	assert.ErrorIs(t, err, io.EOF)
	_ = client.Close()
	assert.Equal(t, fds, openFDs(t), "descriptors left open")
}

// A write larger than the socket takes at once goes out whole: the rest waits in
// Go's network poller, under the write deadline set while detached.
func TestSockWritesMoreThanTheSocketTakes(t *testing.T) {
	k, client := socks(t)
	require.True(t, k.detach())
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		_, err := k.Write(big)
		done <- err
	}()
	// The client reads nothing until the write has had to wait for room.
	eventually(t, "the write waits in Go's network poller", func() bool { return !k.detached() })
	got := make([]byte, len(big))
	_, err := io.ReadFull(client, got)
	require.NoError(t, err)
	require.NoError(t, <-done)
	assert.True(t, bytes.Equal(big, got), "the bytes written differ")

	require.True(t, k.detach())
	require.NoError(t, k.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
	var werr error
	for range 64 { // the client reads nothing: the socket fills, the deadline ends the write
		if _, werr = k.Write(big); werr != nil {
			break
		}
	}
	assert.ErrorIs(t, werr, os.ErrDeadlineExceeded)
	var ne net.Error
	assert.True(t, errors.As(werr, &ne) && ne.Timeout(), "not a net.Error timeout: %v", werr)
}

// Idle connections of both protocols let go of their Go connections once parked, with
// a blocked request pending or not; replies to the blocked requests (one larger than a
// socket takes at once) reach them, the next requests are served, and the connections
// let go again once idle; idle torch connections let go of their torch state too.
// Every descriptor is closed at the end.
func TestParkedConnectionsLetGoOfTheirSockets(t *testing.T) {
	needPoller(t)
	noLeaks(t)
	fds := openFDs(t)
	s, addr := startServer(t)
	ctx := ctxTimeout(t, time.Minute)
	own, torch := clientsOfBothProtocols(t, ctx, addr)
	detached := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for c := range s.conns {
			if k, ok := asSock(c.raw); ok && c.parked.Load() && k.detached() {
				n++
			}
		}
		return n
	}
	big := bytes.Repeat([]byte("v"), MaxValueLen)
	got := blockedGets(ctx, own[0], torch[0])
	eventually(t, "every idle connection is parked without its Go connection", func() bool { return detached() == 6 })

	require.NoError(t, own[1].Set(ctx, "k", big))
	require.NoError(t, torch[1].Set(ctx, "t", []byte("torch")))
	answers := answersOf(t, ctx, got)
	for i, v := range answers {
		if v == string(big) {
			answers[i] = "the large value"
		}
	}
	assert.ElementsMatch(t, []string{"the large value", "torch"}, answers)
	stillServed(t, ctx, own, torch, "t", "torch")
	eventually(t, "the connections let go again", func() bool { return detached() == 6 })
	hibernating := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for c := range s.conns {
			if c.torchGen != 0 && c.torch == nil && c.parked.Load() {
				n++
			}
		}
		return n
	}
	eventually(t, "the idle torch connections let go of their torch state", func() bool { return hibernating() == 3 })
	for _, tc := range torch { // woken, each has it again, and is served
		n, err := tc.Add(ctx, "torch count", 1)
		require.NoError(t, err)
		assert.Positive(t, n)
	}
	eventually(t, "they let go of it again", func() bool { return hibernating() == 3 })

	for _, c := range own {
		require.NoError(t, c.Close())
	}
	for _, tc := range torch {
		require.NoError(t, tc.Close())
	}
	eventually(t, "the server has no connection left", func() bool { return s.numConns() == 0 })
	require.NoError(t, s.Close())
	eventually(t, "no descriptor is left open", func() bool { return openFDs(t) <= fds })
}
