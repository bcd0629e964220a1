package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
)

// logBuffer collects log lines from the server for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// noLeaks fails the test if goroutines started during it are still running once all
// later cleanups (servers, clients) have run.
func noLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines still running after cleanup (started with %d):\n%s", n, before, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// startServer serves on a loopback port; the server is closed at cleanup and Serve
// must have returned nil by then.
func startServer(t testing.TB, opts ...ServerOption) (*Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts = append([]ServerOption{WithLogger(discardLogger())}, opts...)
	s := NewServer(opts...)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), l) }()
	servers.add(l.Addr().String(), s)
	t.Cleanup(func() {
		require.NoError(t, s.Close())
		require.NoError(t, <-served)
	})
	return s, l.Addr().String()
}

func dial(t testing.TB, addr string, opts ...ClientOption) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: the machine may be loaded
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rawConn is a hand-driven connection for protocol tests.
type rawConn struct {
	t  testing.TB
	nc net.Conn
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	return rawDialFrom(t, addr, 1)
}

// loopbackHost is the loopback address 127.0.0.host: the server counts each as a
// client of its own (clientIdentity), so tests play several hosts with them.
func loopbackHost(host int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(host))}
}

// rawDialFrom is rawDial from the loopback address 127.0.0.host.
func rawDialFrom(t testing.TB, addr string, host int) *rawConn {
	t.Helper()
	d := net.Dialer{LocalAddr: loopbackHost(host)}
	nc, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc}
}

// fromHost makes a Client dial from the loopback address 127.0.0.host.
func fromHost(host int) ClientOption {
	return clientOption(func(c *clientConfig) { c.localAddr = loopbackHost(host) })
}

func (r *rawConn) send(o op, id uint32, fields ...[]byte) {
	r.t.Helper()
	var e encoder
	e.begin(o, statusOK, id)
	for _, f := range fields {
		e.bytes(f)
	}
	b, err := e.finish()
	require.NoError(r.t, err)
	_, err = r.nc.Write(b)
	require.NoError(r.t, err)
}

func (r *rawConn) recv() (frame, error) {
	_ = r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	body, _, err := readFrame(r.nc, nil, MaxFrameLen)
	if err != nil {
		return frame{}, err
	}
	return decodeFrame(body, nil)
}

// hello performs the hello exchange and returns the client nonce and the reply.
func (r *rawConn) hello(version uint16) ([]byte, frame) {
	r.t.Helper()
	nonce := newNonce()
	r.send(opHello, 0, []byte(magic), []byte{byte(version >> 8), byte(version)}, nonce)
	f, err := r.recv()
	require.NoError(r.t, err)
	return nonce, f
}

// closedByPeer reports whether the server closed the connection (EOF or reset) within
// a generous time, reading and discarding anything it sent first.
func (r *rawConn) closedByPeer() bool {
	_ = r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := r.nc.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false
		}
		return true
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// servers maps the address of each test server to it, so helpers can look inside.
var servers = &serverIndex{m: make(map[string]*Server)}

type serverIndex struct {
	mu sync.Mutex
	m  map[string]*Server
}

func (i *serverIndex) add(addr string, s *Server) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.m[addr] = s
}

func (i *serverIndex) lookup(addr string) *Server {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.m[addr]
}

func bufioReader(nc net.Conn) *bufio.Reader { return bufio.NewReader(nc) }

// dialPastARefusal dials addr, where nothing listens, with a deadline that passes once
// an attempt has failed on its own (the client logs it), so that the error reports that
// attempt's failure however slow the machine; it returns Dial's error.
func dialPastARefusal(t testing.TB, addr string, opts ...ClientOption) error {
	t.Helper()
	logs := &logBuffer{}
	ctx, expire := nettest.ExpiringContext()
	defer expire()
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, addr, append([]ClientOption{WithLogger(logs.logger())}, opts...)...)
		if err == nil {
			_ = c.Close()
		}
		dialed <- err
	}()
	eventually(t, "an attempt failed", func() bool { return strings.Contains(logs.String(), "dial failed, retrying") })
	expire()
	return <-dialed
}
