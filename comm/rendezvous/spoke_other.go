//go:build !linux

package rendezvous

import "net"

// bytesWaiting reports whether bytes from the peer wait, unread, in the kernel's
// receive buffer of nc. Off Linux it cannot tell and reports false: a connection
// counts as having spoken once its goroutine has read from it.
func bytesWaiting(net.Conn) bool { return false }
