//go:build linux

package rendezvous

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sock is an accepted connection as the server reads and writes it. While it is in
// use, it is the Go connection it was accepted as (Go's network poller waits on it);
// once its connection parks with nothing pending (detach), it is the bare descriptor
// alone, and the Go connection, its addresses and its place in Go's network poller
// are let go of: an idle client then costs the server its descriptor and 48 bytes
// here, not the half kilobyte a Go connection holds. Reads and writes of a detached
// sock go straight to the descriptor; the first one that would have to wait (the
// socket has nothing to read, or no room for what is written) makes it a Go
// connection again (attach, an *os.File on the same descriptor), and waits there
// under the deadlines set meanwhile.
type sock struct {
	mu   sync.Mutex
	conn atomic.Pointer[sockConn] // nil: detached, or closed
	// Guarded by mu: the detached descriptor (-1: none), whether Close was called,
	// and the deadlines set last (Unix nanoseconds; 0: none), which a detached sock's
	// Go connection takes when it attaches.
	fd     int32
	closed bool
	rd, wd int64
}

// sockConn is a sock's Go connection and its descriptor's RawConn.
type sockConn struct {
	net.Conn
	rc syscall.RawConn
}

// newSock wraps nc in k, if the server may take over nc's descriptor (it offers a
// RawConn), and returns k; else it returns nc itself. (k is part of the connection's
// state, allocated with it.)
func newSock(k *sock, nc net.Conn) net.Conn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	k.fd = -1
	k.conn.Store(&sockConn{Conn: nc, rc: rc})
	return k
}

// asSock returns nc as a sock, if it is one.
func asSock(nc net.Conn) (*sock, bool) {
	k, ok := nc.(*sock)
	return k, ok
}

// rawConn returns the descriptor of c's accepted connection, for the poller (nil: it
// has none).
func (c *serverConn) rawConn() syscall.RawConn {
	if k, ok := asSock(c.raw); ok {
		return k.raw()
	}
	return nil
}

// fileConn is a detached descriptor made a Go connection again: an *os.File of a
// non-blocking socket is in Go's network poller and takes deadlines.
type fileConn struct{ *os.File }

func (fileConn) LocalAddr() net.Addr  { return nil }
func (fileConn) RemoteAddr() net.Addr { return nil }

// Read and Write fail as a net.Conn's do (net.ErrClosed once closed).
func (f fileConn) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	return n, netError("read", err)
}

func (f fileConn) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, netError("write", err)
}

// netError is an *os.File's error as a net.Conn's.
func netError(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if errors.Is(err, os.ErrClosed) {
		err = net.ErrClosed
	} else if pe, ok := err.(*os.PathError); ok {
		err = pe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Err: err}
}

// detach lets go of k's Go connection and keeps its descriptor (a duplicate of it:
// Go's connection closes its own); false when k is closed or already detached, or
// the process is out of descriptors. The caller must have removed the descriptor
// from any epoll set it is in, and nothing may read or write k meanwhile.
func (k *sock) detach() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.conn.Load()
	if c == nil || k.closed {
		return false
	}
	fd := -1
	var errno syscall.Errno
	if err := c.rc.Control(func(s uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		fd, errno = int(r), e
	}); err != nil || errno != 0 {
		return false
	}
	k.conn.Store(nil)
	k.fd = int32(fd)
	_ = c.Close()
	return true
}

// detached reports whether k holds its bare descriptor.
func (k *sock) detached() bool { return k.conn.Load() == nil }

// attached returns k's Go connection, making one of its descriptor if k is detached.
func (k *sock) attached() (*sockConn, error) {
	if c := k.conn.Load(); c != nil {
		return c, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.conn.Load(); c != nil {
		return c, nil
	}
	if k.closed || k.fd < 0 {
		return nil, net.ErrClosed
	}
	f := os.NewFile(uintptr(k.fd), "")
	rc, err := f.SyscallConn()
	if err == nil {
		err = f.SetReadDeadline(nanoTime(k.rd)) // fails unless Go's network poller took it
	}
	if err == nil {
		err = f.SetWriteDeadline(nanoTime(k.wd))
	}
	if err != nil {
		// Go's network poller did not take the descriptor (epoll_ctl failed): the
		// connection cannot wait, and ends.
		_ = f.Close()
		k.fd, k.closed = -1, true
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	c := &sockConn{Conn: fileConn{f}, rc: rc}
	k.fd = -1
	k.conn.Store(c)
	return c, nil
}

func nanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func timeNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// Read reads from k: straight from a detached descriptor when bytes have arrived,
// else from k's Go connection.
func (k *sock) Read(p []byte) (int, error) {
	if c := k.conn.Load(); c != nil {
		return c.Read(p)
	}
	if k.expired(&k.rd) {
		return 0, os.ErrDeadlineExceeded
	}
	if n, err, done := readNow(k.raw(), p); done {
		return n, err
	}
	c, err := k.attached()
	if err != nil {
		return 0, err
	}
	return c.Read(p)
}

// Write writes to k: straight to a detached descriptor what its socket takes at
// once, the rest through k's Go connection.
func (k *sock) Write(p []byte) (int, error) {
	if c := k.conn.Load(); c != nil {
		return c.Write(p)
	}
	if k.expired(&k.wd) {
		return 0, os.ErrDeadlineExceeded
	}
	n, err := writeNow(k.raw(), p)
	if err != nil || n == len(p) {
		return n, err
	}
	c, err := k.attached()
	if err != nil {
		return n, err
	}
	m, err := c.Write(p[n:])
	return n + m, err
}

// expired reports whether the deadline *d of a detached sock has passed.
func (k *sock) expired(d *int64) bool {
	k.mu.Lock()
	ns := *d
	k.mu.Unlock()
	return ns != 0 && time.Now().UnixNano() >= ns
}

// Close closes k's connection or its descriptor.
func (k *sock) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return net.ErrClosed
	}
	k.closed = true
	if c := k.conn.Load(); c != nil {
		return c.Close()
	}
	if k.fd < 0 {
		return nil
	}
	// A descriptor that nothing else refers to leaves every epoll set as it closes.
	err := syscall.Close(int(k.fd))
	k.fd = -1
	return err
}

// setDeadline records one of k's deadlines (*d), and sets it on k's Go connection
// (set) if k has one.
func (k *sock) setDeadline(t time.Time, d *int64, set func(net.Conn, time.Time) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	*d = timeNano(t)
	if c := k.conn.Load(); c != nil {
		return set(c.Conn, t)
	}
	if k.closed {
		return net.ErrClosed
	}
	return nil
}

func (k *sock) SetReadDeadline(t time.Time) error {
	return k.setDeadline(t, &k.rd, net.Conn.SetReadDeadline)
}

func (k *sock) SetWriteDeadline(t time.Time) error {
	return k.setDeadline(t, &k.wd, net.Conn.SetWriteDeadline)
}

func (k *sock) SetDeadline(t time.Time) error {
	if err := k.SetReadDeadline(t); err != nil {
		return err
	}
	return k.SetWriteDeadline(t)
}

// LocalAddr and RemoteAddr are the Go connection's (nil while detached: the server
// keeps its client's address as a string).
func (k *sock) LocalAddr() net.Addr {
	if c := k.conn.Load(); c != nil {
		return c.LocalAddr()
	}
	return nil
}

func (k *sock) RemoteAddr() net.Addr {
	if c := k.conn.Load(); c != nil {
		return c.RemoteAddr()
	}
	return nil
}

// SyscallConn returns k's descriptor, as it is now.
func (k *sock) SyscallConn() (syscall.RawConn, error) { return k.raw(), nil }

// raw returns k as a RawConn.
func (k *sock) raw() syscall.RawConn { return (*sockRaw)(k) }

// sockRaw is a sock's descriptor as a RawConn: its Go connection's while it has one,
// else its detached descriptor, held open (k.mu) while f runs.
type sockRaw sock

func (r *sockRaw) Control(f func(fd uintptr)) error {
	k := (*sock)(r)
	k.mu.Lock()
	defer k.mu.Unlock()
	if c := k.conn.Load(); c != nil {
		return c.rc.Control(f)
	}
	if k.closed || k.fd < 0 {
		return net.ErrClosed
	}
	f(uintptr(k.fd))
	return nil
}

// Read and Write wait through Go's network poller: k attaches first.
func (r *sockRaw) Read(f func(fd uintptr) bool) error {
	c, err := (*sock)(r).attached()
	if err != nil {
		return err
	}
	return c.rc.Read(f)
}

func (r *sockRaw) Write(f func(fd uintptr) bool) error {
	c, err := (*sock)(r).attached()
	if err != nil {
		return err
	}
	return c.rc.Write(f)
}
