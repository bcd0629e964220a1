//go:build !linux

package rendezvous

import "errors"

const pollSupported = false

// poller is Linux's (poll_linux.go); elsewhere a connection keeps its goroutine
// while idle.
type poller struct{}

func newPoller() (*poller, error) { return nil, errors.New("no poller on this platform") }

func (*poller) run()                  {}
func (*poller) close()                {}
func (*poller) park(*serverConn) bool { return false }
func (*poller) forget(*serverConn)    {}
func (*poller) release(*serverConn)   {}

func lobbyCap(maxConns, maxUnauth int) int { return maxUnauth }
