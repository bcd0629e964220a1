//go:build linux

package rendezvous

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

const pollSupported = true

// poller watches parked connections (park.go) with one epoll instance and one
// goroutine: each parked connection is registered for one readiness event
// (EPOLLONESHOT), which starts a goroutine for it. The epoll instance is itself
// registered in Go's network poller (an epoll descriptor is readable while events
// wait in it), so that the goroutine waits there like a socket's reader, without a
// thread blocked in epoll_wait: a wake costs no thread handoff.
type poller struct {
	ep   int
	file *os.File        // owns ep once made
	rc   syscall.RawConn // of file, when Go's network poller took it; nil: run blocks in epoll_wait
	stop [2]int          // a pipe: a byte written to stop[1] ends run

	mu      sync.Mutex
	conns   map[int32]*serverConn // by pollID; 0 is the pipe
	next    int32
	stopped bool
}

func newPoller() (*poller, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	p := &poller{ep: ep, conns: make(map[int32]*serverConn)}
	if err := syscall.Pipe2(p.stop[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		_ = syscall.Close(ep)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, p.stop[0], &syscall.EpollEvent{Events: syscall.EPOLLIN}); err != nil {
		p.closeFDs()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	if syscall.SetNonblock(ep, true) == nil {
		// os.NewFile registers a non-blocking descriptor in Go's network poller; one it
		// cannot register takes no deadline, and run then blocks in epoll_wait.
		f := os.NewFile(uintptr(ep), "epoll")
		p.file = f // it owns ep from here on
		if rc, err := f.SyscallConn(); err == nil && f.SetReadDeadline(time.Time{}) == nil {
			p.rc = rc
		}
	}
	return p, nil
}

func (p *poller) closeFDs() {
	if p.file != nil {
		_ = p.file.Close()
	} else {
		_ = syscall.Close(p.ep)
	}
	_ = syscall.Close(p.stop[0])
	_ = syscall.Close(p.stop[1])
}

// run wakes the connections that become readable until close; then it wakes every
// connection still parked (they go on with goroutines of their own).
func (p *poller) run() {
	defer p.closeFDs()
	events := make([]syscall.EpollEvent, 256)
	if p.rc != nil {
		p.runInNetpoller(events)
	} else {
		for {
			n, err := syscall.EpollWait(p.ep, events, -1)
			if err == syscall.EINTR {
				continue
			}
			if err != nil || p.dispatch(events[:n]) {
				break
			}
		}
	}
	p.mu.Lock()
	p.stopped = true
	parked := make([]*serverConn, 0, len(p.conns))
	for _, c := range p.conns {
		parked = append(parked, c)
	}
	p.mu.Unlock()
	for _, c := range parked {
		c.wake()
	}
}

// runInNetpoller is run's loop through Go's network poller: the epoll instance is
// checked without blocking, and the goroutine sleeps in Go's poller until it is
// readable again. The whole loop is one RawRead, so that readiness that comes while
// the woken connections are dispatched is kept (a new RawRead would clear it first):
// after a check that drained the instance (fewer events than the batch holds) the
// goroutine goes straight to sleep, without a second epoll_wait that would find
// nothing. A wake then costs one epoll_wait.
func (p *poller) runInNetpoller(events []syscall.EpollEvent) {
	_ = p.rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.EpollWait(int(fd), events, 0)
			switch {
			case err == syscall.EINTR:
				continue
			case err != nil:
				return true
			case n == 0:
				return false // sleep until the instance is readable
			case p.dispatch(events[:n]):
				return true
			case n < len(events):
				return false // drained: the next event makes it readable again
			}
		}
	})
}

// dispatch wakes the connections of events; it reports whether close was called.
func (p *poller) dispatch(events []syscall.EpollEvent) (stopped bool) {
	var woken []*serverConn
	p.mu.Lock()
	for _, ev := range events {
		if ev.Fd == 0 {
			p.stopped = true
		} else if c := p.conns[ev.Fd]; c != nil {
			woken = append(woken, c)
		}
	}
	stopped = p.stopped
	p.mu.Unlock()
	for _, c := range woken {
		c.wake()
	}
	return stopped
}

// close ends run.
func (p *poller) close() {
	_, _ = syscall.Write(p.stop[1], []byte{0})
}

// park registers c's socket for its next readiness event; false when it cannot.
func (p *poller) park(c *serverConn) bool {
	sc, ok := c.raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || c.pollID < 0 { // c ended meanwhile (forget)
		return false
	}
	if c.pollID == 0 {
		for {
			p.next++
			if p.next <= 0 {
				p.next = 1
			}
			if p.conns[p.next] == nil {
				break
			}
		}
		c.pollID = p.next
		p.conns[c.pollID] = c
	}
	op := syscall.EPOLL_CTL_MOD
	if !c.polled {
		op = syscall.EPOLL_CTL_ADD
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: c.pollID}
	var cerr error
	// Control holds the socket open: its descriptor is c's, not a reused number.
	if err := rc.Control(func(fd uintptr) { cerr = syscall.EpollCtl(p.ep, op, int(fd), &ev) }); err != nil || cerr != nil {
		return false
	}
	c.polled = true
	return true
}

// forget unregisters c (it ends).
func (p *poller) forget(c *serverConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.pollID > 0 {
		delete(p.conns, c.pollID)
	}
	c.pollID = -1 // park refuses it now
	if !c.polled {
		return
	}
	c.polled = false
	if sc, ok := c.raw.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			// A closed socket has left the epoll set with its descriptor.
			_ = rc.Control(func(fd uintptr) { _ = syscall.EpollCtl(p.ep, syscall.EPOLL_CTL_DEL, int(fd), nil) })
		}
	}
}

// release unregisters c (it leaves the lobby) so that it may be parked again later
// as if it were new.
func (p *poller) release(c *serverConn) {
	p.forget(c)
	p.mu.Lock()
	c.pollID = 0
	p.mu.Unlock()
}

// lobbyCap is how many silent connections the lobby may hold: 4 per connection slot,
// at most half the descriptors the process may open, at least one per handshake slot.
func lobbyCap(maxConns, maxUnauth int) int {
	var l syscall.Rlimit
	n := 4 * maxConns
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < 1<<40 {
		n = min(n, int(l.Cur)/2)
	}
	return max(n, maxUnauth)
}
