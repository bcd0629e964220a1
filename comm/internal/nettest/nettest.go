// Package nettest gives tests of comm and comm/rendezvous loopback ports that stay
// theirs for the whole test.
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
	"syscall"
	"testing"
)

// Port returns a loopback TCP port on 127.0.0.1 reserved for t until t ends.
func Port(t testing.TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("reserve a loopback port: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatalf("reserve a loopback port: SO_REUSEADDR: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("reserve a loopback port: bind 127.0.0.1:0: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("reserve a loopback port: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("reserve a loopback port: getsockname gave %T, not an IPv4 address", sa)
	}
	return in4.Port
}
