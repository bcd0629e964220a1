package main

// An experiment, not a product: a TCPStore server built as one event loop (epoll,
// level-triggered, nonblocking sockets, one goroutine locked to its thread) that
// answers what storebench's steady phase sends (generation 2 of torch's protocol:
// VALIDATE, PING, SET, CHECK, WAIT, GET, and ADD), to measure the server CPU per
// operation such a design costs next to ncclgo's goroutine-per-connection server
// and PyTorch's C++ one. It has no authentication, no limits beyond the protocol's,
// no deadlines, no fairness between hosts and no orderly Close: see storebench's
// -evloop flag.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// elConn is one client connection of the loop.
type elConn struct {
	fd      int
	in      []byte // bytes received and not yet parsed
	out     []byte // replies not yet written
	dirty   bool   // out gained bytes in this wake-up
	waiting int    // keys a pending WAIT still misses (0: none pending)
	wantOut bool   // registered for EPOLLOUT
}

// evloop is the server's state: all of it belongs to the loop's goroutine.
type evloop struct {
	ep, lfd int
	raw     bool // reads, writes and epoll_wait as raw system calls, unseen by the scheduler
	// hybrid: raw reads, writes and polls that do not block; a blocking epoll_wait
	// through the scheduler (which may hand the loop's P to another goroutine).
	hybrid  bool
	conns   map[int]*elConn
	store   map[string][]byte
	waiters map[string][]*elConn
	dirty   []*elConn
	rbuf    []byte
}

// serveEvloop runs the event-loop server on a loopback port until stdin closes,
// printing its port as serveNcclgo does; args[0] is -evloop's mode (go, raw, hybrid).
func serveEvloop(args []string) {
	mode := "go"
	if len(args) > 0 {
		mode = args[0]
	}
	_, port, err := startEvloop(mode)
	if err != nil {
		fatalf("%v", err)
	}
	fmt.Printf("PORT %d TORCH -\n", port)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "gc" {
			runtime.GC()
			debug.FreeOSMemory()
		}
		fmt.Println("ok")
	}
}

// startEvloop listens on a loopback port and serves it with a loop of its own, for
// the rest of the process's life.
func startEvloop(mode string) (*evloop, int, error) {
	el := &evloop{raw: mode == "raw", hybrid: mode == "hybrid", conns: map[int]*elConn{}, store: map[string][]byte{}, waiters: map[string][]*elConn{}, rbuf: make([]byte, 64<<10)}
	lfd, port, err := listenLoopback()
	if err != nil {
		return nil, 0, fmt.Errorf("evloop: listen: %w", err)
	}
	el.lfd = lfd
	if el.ep, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, 0, fmt.Errorf("evloop: epoll_create1: %w", err)
	}
	if err := syscall.EpollCtl(el.ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(lfd)}); err != nil {
		return nil, 0, fmt.Errorf("evloop: epoll_ctl: %w", err)
	}
	go el.run()
	return el, port, nil
}

func listenLoopback() (fd, port int, err error) {
	fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, 0, err
	}
	if err := syscall.Listen(fd, 65535); err != nil { // the kernel caps it at somaxconn
		return 0, 0, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, 0, err
	}
	return fd, sa.(*syscall.SockaddrInet4).Port, nil
}

func (el *evloop) epollWait(events []syscall.EpollEvent, msec int) (int, syscall.Errno) {
	if !el.raw && (!el.hybrid || msec != 0) {
		n, err := syscall.EpollWait(el.ep, events, msec)
		if err != nil {
			return 0, err.(syscall.Errno)
		}
		return n, 0
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(el.ep), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), uintptr(msec), 0, 0)
	return int(n), e
}

// rw reads or writes (sysno) fd through the scheduler, or raw (-evloop raw).
func (el *evloop) rw(sysno uintptr, fd int, p []byte) (int, syscall.Errno) {
	call := syscall.Syscall
	if el.raw || el.hybrid {
		call = syscall.RawSyscall
	}
	n, _, e := call(sysno, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

func (el *evloop) run() {
	runtime.LockOSThread()
	events := make([]syscall.EpollEvent, 1024)
	for {
		// First without blocking: a busy loop never enters a blocking wait.
		n, e := el.epollWait(events, 0)
		if n == 0 && e == 0 {
			n, e = el.epollWait(events, -1)
		}
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			fatalf("evloop: epoll_wait: %v", e)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == el.lfd {
				el.accept()
				continue
			}
			c := el.conns[fd]
			if c == nil {
				continue
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				el.readConn(c)
			}
			if ev.Events&syscall.EPOLLOUT != 0 && el.conns[fd] == c {
				el.flush(c)
			}
		}
		// One write per connection per wake-up, whatever it answered in between.
		for _, c := range el.dirty {
			c.dirty = false
			if el.conns[c.fd] == c {
				el.flush(c)
			}
		}
		el.dirty = el.dirty[:0]
	}
}

func (el *evloop) accept() {
	for range 256 {
		fd, _, err := syscall.Accept4(el.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN, or a connection gone before it was accepted
		}
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if err := syscall.EpollCtl(el.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
			_ = syscall.Close(fd)
			continue
		}
		el.conns[fd] = &elConn{fd: fd}
	}
}

func (el *evloop) drop(c *elConn) {
	delete(el.conns, c.fd)
	_ = syscall.Close(c.fd) // also removes it from the epoll set
	c.fd = -1
}

func (el *evloop) readConn(c *elConn) {
	n, e := el.rw(syscall.SYS_READ, c.fd, el.rbuf)
	switch {
	case e == syscall.EAGAIN || e == syscall.EINTR:
		return
	case e != 0 || n == 0:
		el.drop(c)
		return
	}
	data := el.rbuf[:n]
	if len(c.in) > 0 {
		c.in = append(c.in, data...)
		data = c.in
	}
	used, ok := el.handle(c, data)
	if !ok {
		el.drop(c)
		return
	}
	rest := data[used:]
	switch {
	case len(rest) == 0:
		c.in = c.in[:0]
	case len(c.in) > 0:
		c.in = c.in[:copy(c.in, rest)]
	default:
		c.in = append(c.in[:0], rest...) // a partial request: keep it for the next read
	}
	if len(c.in) == 0 && cap(c.in) > 64<<10 {
		c.in = nil
	}
}

func (el *evloop) reply(c *elConn, b ...byte) {
	c.out = append(c.out, b...)
	el.mark(c)
}

func (el *evloop) mark(c *elConn) {
	if !c.dirty {
		c.dirty = true
		el.dirty = append(el.dirty, c)
	}
}

func (el *evloop) flush(c *elConn) {
	for len(c.out) > 0 {
		n, e := el.rw(syscall.SYS_WRITE, c.fd, c.out)
		if e == syscall.EAGAIN {
			if !c.wantOut {
				c.wantOut = true
				_ = syscall.EpollCtl(el.ep, syscall.EPOLL_CTL_MOD, c.fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLOUT, Fd: int32(c.fd)})
			}
			return
		}
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			el.drop(c)
			return
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	if c.wantOut {
		c.wantOut = false
		_ = syscall.EpollCtl(el.ep, syscall.EPOLL_CTL_MOD, c.fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(c.fd)})
	}
}

// elParser reads one request from a buffer that may end in the middle of it: short
// says so, bad that the request breaks the protocol.
type elParser struct {
	b          []byte
	off        int
	short, bad bool
}

func (p *elParser) need(n int) bool {
	if p.short || p.bad {
		return false
	}
	if len(p.b)-p.off < n {
		p.short = true
		return false
	}
	return true
}

func (p *elParser) u32() uint32 {
	if !p.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(p.b[p.off:])
	p.off += 4
	return v
}

func (p *elParser) u64() uint64 {
	if !p.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(p.b[p.off:])
	p.off += 8
	return v
}

// bytes reads a length, at most limit, and that many bytes (in the buffer).
func (p *elParser) bytes(limit int) []byte {
	n := p.u64()
	if p.short || p.bad {
		return nil
	}
	if n > uint64(limit) {
		p.bad = true
		return nil
	}
	if !p.need(int(n)) {
		return nil
	}
	v := p.b[p.off : p.off+int(n)]
	p.off += int(n)
	return v
}

func (p *elParser) key() []byte { return p.bytes(rendezvous.MaxKeyLen + 1) }

// handle answers the complete requests at the start of data; it returns the bytes
// they took and false when the connection must be dropped.
func (el *evloop) handle(c *elConn, data []byte) (int, bool) {
	used := 0
	for used < len(data) {
		if c.waiting > 0 {
			return used, false // one request at a time: CANCEL_WAIT is not served
		}
		p := elParser{b: data, off: used + 1}
		switch q := data[used]; q {
		case 0: // VALIDATE
			if p.u32() != 0x3C85F7CE && !p.short {
				return used, false
			}
		case 13: // PING
			v := p.u32()
			if !p.short {
				c.out = binary.LittleEndian.AppendUint32(c.out, v)
				el.mark(c)
			}
		case 1: // SET
			k, v := p.key(), p.bytes(rendezvous.MaxValueLen)
			if !p.short && !p.bad {
				el.set(k, v)
			}
		case 3: // GET
			k := p.key()
			if !p.short && !p.bad {
				v, ok := el.store[string(k)]
				if !ok {
					return used, false
				}
				c.out = binary.LittleEndian.AppendUint64(c.out, uint64(len(v)))
				c.out = append(c.out, v...)
				el.mark(c)
			}
		case 4: // ADD
			k := p.key()
			d := int64(p.u64())
			if !p.short && !p.bad {
				var n int64
				if v, ok := el.store[string(k)]; ok {
					_, _ = fmt.Sscan(string(v), &n)
				}
				n += d
				el.set(k, fmt.Appendf(nil, "%d", n))
				c.out = binary.LittleEndian.AppendUint64(c.out, uint64(n))
				el.mark(c)
			}
		case 5, 6: // CHECK, WAIT
			n := p.u64()
			if n > rendezvous.MaxKeysPerRequest {
				return used, false
			}
			missing := 0
			var keys [][]byte
			for range n {
				k := p.key()
				if p.short || p.bad {
					break
				}
				if _, ok := el.store[string(k)]; !ok {
					missing++
					keys = append(keys, k)
				}
			}
			if p.short || p.bad {
				break
			}
			switch {
			case q == 5 && missing > 0:
				el.reply(c, 1)
			case missing == 0:
				el.reply(c, 0)
			default:
				c.waiting = missing
				for _, k := range keys {
					el.waiters[string(k)] = append(el.waiters[string(k)], c)
				}
			}
		default:
			return used, false
		}
		if p.bad {
			return used, false
		}
		if p.short {
			return used, true
		}
		used = p.off
	}
	return used, true
}

// set stores v under k, reusing the value's buffer, and answers the waits it ends.
func (el *evloop) set(k, v []byte) {
	if old, ok := el.store[string(k)]; ok {
		if cap(old) >= len(v) {
			el.store[string(k)] = append(old[:0], v...)
			return
		}
		el.store[string(k)] = append([]byte(nil), v...)
		return
	}
	key := string(k)
	el.store[key] = append([]byte(nil), v...)
	for _, w := range el.waiters[key] {
		if w.fd < 0 {
			continue
		}
		if w.waiting--; w.waiting == 0 {
			el.reply(w, 0)
		}
	}
	delete(el.waiters, key)
}
