//go:build linux

package rendezvous

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const pollSupported = true

// poller watches parked connections (park.go) with one epoll instance: each parked
// connection is registered for one readiness event (EPOLLONESHOT). The epoll instance
// is itself registered in Go's network poller (an epoll descriptor is readable while
// events wait in it), so that the goroutine that waits on it (the poller's leader)
// sleeps there like a socket's reader, without a thread blocked in epoll_wait.
//
// The leader serves the connections of each batch of events itself, one after
// another (serveInline), and reads the next batch once it has served them all.
// Serving on the goroutine that Go's network poller woke costs no second goroutine
// and no second thread that the scheduler wakes to run it: an idle rank's occasional
// request then costs about what it costs on a connection in use, and a wake storm
// (every rank's request at once) starts no goroutine per connection. Before the
// connection it serves would block (a read or a write that cannot complete at once, a
// wait for a turn), the leader hands the epoll instance to a new goroutine, which
// serves the rest of the batch (rest) before it reads the next: no parked connection
// waits on another's client.
type poller struct {
	ep   int
	file *os.File        // owns ep once made
	rc   syscall.RawConn // of file, when Go's network poller took it; nil: wait blocks in epoll_wait
	stop [2]int          // a pipe: a byte written to stop[1] ends the leader
	// lead starts a new leader goroutine (set once by the server that made p).
	lead func()
	// cur is the connection the leader serves now (nil: none, or it was handed off).
	cur atomic.Pointer[inlineServe]

	mu    sync.Mutex
	conns map[int32]*serverConn // by pollID; 0 is the pipe
	next  int32
	// rest[restAt:] are the connections of the last batch, taken from the poller (no
	// longer parked) and not served yet, in the order their events came.
	rest    []*serverConn
	restAt  int
	stopped bool
	ended   bool // a leader has closed the descriptors
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

// run is the leader's loop: it serves the connections that become readable until
// close, a batch at a time; then every connection still parked or not yet served
// goes on with a goroutine of its own. It returns early when the connection it
// serves hands the poller to a new leader, which serves the rest of the batch.
func (p *poller) run() {
	var events []syscall.EpollEvent
	for {
		c, stopped := p.take()
		if stopped {
			break
		}
		if c != nil {
			if !p.serveInline(c) {
				return // a new leader polls now
			}
			continue
		}
		if events == nil {
			events = make([]syscall.EpollEvent, 256)
		}
		n, ok := p.wait(events)
		if !ok {
			break
		}
		if p.dispatch(events[:n]) {
			break
		}
	}
	p.mu.Lock()
	p.stopped = true
	ended := p.ended
	p.ended = true
	parked := make([]*serverConn, 0, len(p.conns))
	for _, c := range p.conns {
		parked = append(parked, c)
	}
	taken := p.rest[p.restAt:]
	p.rest, p.restAt = nil, 0
	p.mu.Unlock()
	if !ended {
		p.closeFDs()
	}
	for _, c := range taken { // taken from the poller: no longer parked
		go c.run(c.resume, true)
	}
	for _, c := range parked {
		c.wake()
	}
}

// take takes the next connection of the batch that the leader serves (nil: the batch
// is done); stopped is true once close was called.
func (p *poller) take() (c *serverConn, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, true
	}
	if p.restAt == len(p.rest) {
		p.rest, p.restAt = p.rest[:0], 0 // its array serves the next batch
		return nil, false
	}
	c = p.rest[p.restAt]
	p.rest[p.restAt] = nil
	p.restAt++
	return c, false
}

// wait waits until events are ready and reads them into events; false when the epoll
// instance failed. Through Go's network poller, the instance is checked without
// blocking, and the goroutine sleeps in Go's poller until it is readable.
func (p *poller) wait(events []syscall.EpollEvent) (int, bool) {
	var n int
	var err error
	if p.rc == nil {
		for {
			n, err = syscall.EpollWait(p.ep, events, -1)
			if err != syscall.EINTR {
				return n, err == nil
			}
		}
	}
	rerr := p.rc.Read(func(fd uintptr) bool {
		for {
			n, err = syscall.EpollWait(int(fd), events, 0)
			if err != syscall.EINTR {
				return err != nil || n > 0
			}
		}
	})
	return n, rerr == nil && err == nil
}

// dispatch takes the connections of events from the poller into rest, for the leader
// to serve; a connection in the lobby leaves it on a goroutine of its own (as wake). It
// reports whether close was called (run then wakes every connection).
func (p *poller) dispatch(events []syscall.EpollEvent) (stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		if ev.Fd == 0 {
			p.stopped = true
			continue
		}
		c := p.conns[ev.Fd]
		if c == nil || !c.parked.CompareAndSwap(true, false) {
			continue
		}
		if c.step == nil { // in the lobby: as wake
			go c.s.leaveLobby(c)
		} else {
			p.rest = append(p.rest, c)
		}
	}
	return p.stopped
}

// inlineServe is the connection the leader serves (a new one each time, so that a
// leader that handed the poller off never takes it for its own again).
type inlineServe struct {
	c     *serverConn
	since time.Time
}

// serveInline serves c, which the leader took from the poller, on the leader's
// goroutine; it reports whether that goroutine is still the leader afterwards.
func (p *poller) serveInline(c *serverConn) bool {
	l := &inlineServe{c: c, since: time.Now()}
	p.cur.Store(l)
	c.run(c.resume, true)
	return p.cur.CompareAndSwap(l, nil)
}

// serving reports whether the leader serves c now.
func (p *poller) serving(c *serverConn) bool {
	l := p.cur.Load()
	return l != nil && l.c == c
}

// handOff makes a new goroutine the leader if the leader serves c now (c is about to
// block); the goroutine serving c goes on with it alone.
func (p *poller) handOff(c *serverConn) {
	if l := p.cur.Load(); l != nil && l.c == c && p.cur.CompareAndSwap(l, nil) {
		p.lead()
	}
}

// handOffStalled makes a new goroutine the leader if the leader has served the same
// connection for longer than d: a backstop for waits that do not call handOff (a
// lock that another goroutine holds while it writes to the same client).
func (p *poller) handOffStalled(d time.Duration) {
	if l := p.cur.Load(); l != nil && time.Since(l.since) > d && p.cur.CompareAndSwap(l, nil) {
		p.lead()
	}
}

// rawOp is one system call on a socket made through its RawConn's Control (which
// holds the descriptor open meanwhile): its arguments, its results, and the functions
// Control runs, made once. rawOps keeps them, so that a request on a parked
// connection allocates no closure for its read, its write and its parking again.
type rawOp struct {
	b   []byte
	n   int
	err error
	// epoll_ctl's
	ep, op int
	ev     syscall.EpollEvent

	read, write, ctl func(fd uintptr)
}

var rawOps = sync.Pool{New: func() any {
	o := &rawOp{}
	o.read, o.write, o.ctl = o.doRead, o.doWrite, o.doCtl
	return o
}}

func getRawOp() *rawOp { return rawOps.Get().(*rawOp) }

func (o *rawOp) put() {
	*o = rawOp{read: o.read, write: o.write, ctl: o.ctl}
	rawOps.Put(o)
}

func (o *rawOp) doRead(fd uintptr) {
	for {
		o.n, o.err = syscall.Read(int(fd), o.b)
		if o.err != syscall.EINTR {
			return
		}
	}
}

func (o *rawOp) doWrite(fd uintptr) {
	for o.n < len(o.b) {
		m, err := syscall.Write(int(fd), o.b[o.n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			o.err = err
			return
		}
		o.n += m
	}
}

func (o *rawOp) doCtl(fd uintptr) {
	ev := &o.ev
	if o.op == syscall.EPOLL_CTL_DEL {
		ev = nil
	}
	o.err = syscall.EpollCtl(o.ep, o.op, int(fd), ev)
}

// readNow reads from c's socket what has arrived, without waiting; done is false
// when nothing has.
func readNow(rc syscall.RawConn, b []byte) (n int, err error, done bool) {
	o := getRawOp()
	o.b = b
	cerr := rc.Control(o.read)
	n, err = o.n, o.err
	o.put()
	switch {
	case cerr != nil:
		return 0, cerr, true
	case err == syscall.EAGAIN:
		return 0, nil, false
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", err)}, true
	case n == 0 && len(b) > 0:
		return 0, io.EOF, true
	}
	return n, nil, true
}

// writeNow writes what of b the socket takes without waiting.
func writeNow(rc syscall.RawConn, b []byte) (n int, err error) {
	o := getRawOp()
	o.b = b
	cerr := rc.Control(o.write)
	n, err = o.n, o.err
	o.put()
	switch {
	case cerr != nil:
		return n, cerr
	case err == syscall.EAGAIN:
		return n, nil
	case err != nil:
		return n, &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", err)}
	}
	return n, nil
}

// epollCtl registers (op) or unregisters the socket of rc in the epoll instance ep.
func epollCtl(rc syscall.RawConn, ep, op int, ev syscall.EpollEvent) error {
	o := getRawOp()
	o.ep, o.op, o.ev = ep, op, ev
	cerr := rc.Control(o.ctl)
	err := o.err
	o.put()
	if cerr != nil {
		return cerr
	}
	return err
}

// close ends run.
func (p *poller) close() {
	_, _ = syscall.Write(p.stop[1], []byte{0})
}

// park registers c's socket for its next readiness event; false when it cannot.
func (p *poller) park(c *serverConn) bool {
	rc := c.rawConn()
	if rc == nil {
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
	// Control holds the socket open: its descriptor is c's, not a reused number.
	if epollCtl(rc, p.ep, op, ev) != nil {
		return false
	}
	c.polled = true
	return true
}

// detach makes c's sock k, about to be parked, let go of its Go connection: its
// descriptor changes, so it first leaves the epoll set.
func (p *poller) detach(c *serverConn, k *sock) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || c.pollID < 0 {
		return
	}
	if c.polled {
		if epollCtl(k.raw(), p.ep, syscall.EPOLL_CTL_DEL, syscall.EpollEvent{}) != nil {
			return
		}
		c.polled = false
	}
	k.detach()
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
	if rc := c.rawConn(); rc != nil {
		// A closed socket has left the epoll set with its descriptor.
		_ = epollCtl(rc, p.ep, syscall.EPOLL_CTL_DEL, syscall.EpollEvent{})
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
