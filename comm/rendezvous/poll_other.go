//go:build !linux

package rendezvous

import (
	"errors"
	"net"
	"syscall"
	"time"
)

const pollSupported = false

// poller is Linux's (poll_linux.go); elsewhere a connection keeps its goroutine
// while idle.
type poller struct{ lead func() }

func newPoller() (*poller, error) { return nil, errors.New("no poller on this platform") }

func (*poller) run()                      {}
func (*poller) close()                    {}
func (*poller) park(*serverConn) bool     { return false }
func (*poller) forget(*serverConn)        {}
func (*poller) release(*serverConn)       {}
func (*poller) detach(*serverConn, *sock) {}

func (*poller) serving(*serverConn) bool     { return false }
func (*poller) handOff(*serverConn)          {}
func (*poller) handOffStalled(time.Duration) {}

func readNow(syscall.RawConn, []byte) (int, error, bool) { return 0, nil, false }
func writeNow(syscall.RawConn, []byte) (int, error)      { return 0, nil }

func lobbyCap(maxConns, maxUnauth int) int { return maxUnauth }

// newSock returns nc: connections are detached from Go's network poller on Linux only
// (sock_linux.go).
func newSock(_ *sock, nc net.Conn) net.Conn { return nc }

// sock is Linux's (sock_linux.go).
type sock struct{}

func (*sock) detached() bool { return false }

func asSock(net.Conn) (*sock, bool) { return nil, false }

func (*serverConn) rawConn() syscall.RawConn { return nil }
