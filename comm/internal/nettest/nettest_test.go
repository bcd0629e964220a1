package nettest

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPortRefusesConnectionsAndStaysReserved(t *testing.T) {
	port := Port(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	_, err := net.Dial("tcp", addr)
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "nothing listens on a reserved port")

	// A bind that does not share the port is refused: the port is taken.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	assert.ErrorIs(t, err, syscall.EADDRINUSE, "the port is bound while reserved")

	// Port-0 listeners, as other tests and processes open them, never get the port.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range 2000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ls = append(ls, l)
		require.NotEqual(t, port, l.Addr().(*net.TCPAddr).Port, "a port-0 listener got the reserved port")
	}

	// The test itself can still serve on it.
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, l.Close())
}

func TestExpiringContextEndsWithDeadlineExceededWhenExpired(t *testing.T) {
	ctx, expire := ExpiringContext()
	_, has := ctx.Deadline()
	assert.False(t, has)
	require.NoError(t, ctx.Err())
	select {
	case <-ctx.Done():
		t.Fatal("done before expire")
	default:
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	expire()
	expire() // a second call does nothing
	<-ctx.Done()
	<-child.Done()
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	assert.ErrorIs(t, child.Err(), context.DeadlineExceeded, "derived contexts end with it")
}

func TestReserveHoldsThePortUntilReleased(t *testing.T) {
	port, release, err := Reserve()
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	sa := &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	assert.ErrorIs(t, syscall.Bind(fd, sa), syscall.EADDRINUSE, "the port is bound while reserved")
	_, err = net.Dial("tcp", addr)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	release()
	release() // a second release does nothing
	assert.NoError(t, syscall.Bind(fd, sa), "the port is free once released")
}
