// Package nettest gives tests of comm and comm/rendezvous what they need to stay
// correct on a loaded machine: loopback ports that stay theirs for the whole test
// (Port), and deadlines that pass when the test says, not when a timer does
// (ExpiringContext).
//
// A port found by listening on port 0 and closing the listener is free only for a
// moment: another test process, or any outgoing connection, can take it before the test
// uses it, and a test that expects "nothing listens there" then talks to a stranger.
// Port keeps a socket bound to the port, with SO_REUSEADDR, that never listens. While it
// is held, connecting to the port is refused, the kernel gives the port to no other
// port-0 bind and to no outgoing connection, and the test can still listen on the port
// itself (Go's listeners set SO_REUSEADDR too).
package nettest

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Port returns a loopback TCP port on 127.0.0.1 reserved for t until t ends.
func Port(t testing.TB) int {
	t.Helper()
	port, release, err := Reserve()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return port
}

// Reserve is Port for code without a testing.TB (a harness that starts worlds on its
// own): the port stays reserved until release is called.
func Reserve() (port int, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, nil, fmt.Errorf("reserve a loopback port: socket: %w", err)
	}
	syscall.CloseOnExec(fd) // rank processes the test starts do not inherit it
	fail := func(what string, err error) (int, func(), error) {
		_ = syscall.Close(fd)
		return 0, nil, fmt.Errorf("reserve a loopback port: %s: %w", what, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail("bind 127.0.0.1:0", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return fail("getsockname", fmt.Errorf("an address of type %T, not IPv4", sa))
	}
	var once sync.Once
	return in4.Port, func() { once.Do(func() { _ = syscall.Close(fd) }) }, nil
}

// ExpiringContext returns a context that ends with context.DeadlineExceeded when expire
// is called (later calls do nothing). A test whose outcome depends on what has happened
// by the time a deadline passes (which ranks arrived at a barrier, say) waits for that
// to happen and then expires the context: a timer of a few hundred milliseconds can
// pass first on a machine whose cores are busy. The context reports no deadline.
func ExpiringContext() (ctx context.Context, expire func()) {
	e := &expiring{done: make(chan struct{})}
	var once sync.Once
	return e, func() { once.Do(func() { close(e.done) }) }
}

type expiring struct{ done chan struct{} }

func (e *expiring) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *expiring) Done() <-chan struct{}       { return e.done }
func (e *expiring) Value(any) any               { return nil }
func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
