//go:build linux

package rendezvous

import (
	"net"
	"syscall"
)

// bytesWaiting reports whether bytes from the peer wait, unread, in the kernel's
// receive buffer of nc: a peek that neither blocks nor takes the connection's read
// lock, so it may run while the connection's goroutine is blocked reading it. It
// reports false when it cannot tell.
func bytesWaiting(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	var b [1]byte
	_ = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = err == nil && n > 0
	})
	return waiting
}
