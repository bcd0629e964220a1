package rendezvous

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Client is one connection to a Server. Its methods are safe for concurrent use: calls
// are pipelined on the one connection, each tagged with an id, and the server answers
// them in any order, so a Get blocked on a missing key never holds up a Set or another
// Get from the same client (a mutex around the connection would). Every method that
// waits honours its context; a blocked Get or Wait whose context ends is cancelled on
// the server too.
//
// When the connection is lost, or the server sends nothing, not even a reply to a
// keepalive, for three keepalive intervals (ErrUnresponsive: a frozen store), every
// pending and later call fails with ErrClosed, whatever its context; the client does
// not reconnect. A request that cannot be written completely before its
// context's deadline would leave a cut frame on the connection, so it closes the client
// too. Close the client when done with it.
type Client struct {
	addr string
	nc   net.Conn
	log  *slog.Logger
	idle time.Duration  // announced by the server; keepalives go out every idle/3
	wg   sync.WaitGroup // the reader, keepalives and cancels in flight

	heard atomic.Int64 // when a byte last arrived from the server (UnixNano)

	nextID atomic.Uint32

	wmu  sync.Mutex // held while writing to the connection
	ping encoder    // the keepalive's, under wmu

	qmu     sync.Mutex // guards the frames waiting for the writer
	qcond   *sync.Cond // on qmu: a write ended
	enc     encoder    // under qmu
	queue   []byte     // whole frames not yet handed to the connection
	spare   []byte     // the buffer of the last write, for reuse
	qdl     time.Time  // the earliest deadline among the queued frames (zero: none)
	queued  uint64     // frames queued so far
	sent    uint64     // frames whose write has ended
	writing bool       // a call is writing the queue
	wfailed bool       // a write failed (the client has failed with its error)

	mu      sync.Mutex
	err     error // why the client stopped; nil while it works
	pending map[uint32]chan reply
	pinger  *time.Timer // sends keepalives and watches for a silent server
}

// minKeepalive bounds how often a client pings, whatever idle timeout a server
// announces.
const minKeepalive = 10 * time.Millisecond

// minSilence is the shortest silence after which a server is declared dead, whatever
// idle timeout it announces.
const minSilence = 3 * time.Second

type reply struct {
	status status
	fields [][]byte
	err    error
}

// Dial connects to the server at addr ("host:port") and performs the handshake. It
// retries refused connections and a busy server until ctx ends, so ranks may start
// before rank 0's server listens; it fails at once on a version mismatch or a token
// that does not match.
func Dial(ctx context.Context, addr string, opts ...ClientOption) (*Client, error) {
	cfg := clientConfig{}
	for _, o := range opts {
		if o != nil {
			o.applyClient(&cfg)
		}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if addr == "" {
		return nil, fmt.Errorf("dial: %w: empty address", ErrInvalidArgument)
	}
	delay := 5 * time.Millisecond
	start := time.Now()
	var last error   // the last failure not caused by ctx ending
	reached := false // some attempt found a listener
	for attempt := 1; ; attempt++ {
		c, err := dialOnce(ctx, addr, cfg)
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrVersionMismatch) || errors.Is(err, ErrProtocol) {
			return nil, err
		}
		var de *dialError
		if !errors.As(err, &de) {
			reached = true
		}
		// An attempt cut short by ctx's deadline may end before ctx.Err() says so.
		dl, hasDeadline := ctx.Deadline()
		if cut := ctx.Err() != nil || (hasDeadline && !time.Now().Before(dl)); !cut || last == nil {
			last = err
		}
		if ctx.Err() != nil {
			return nil, dialGaveUp(ctx, addr, cfg, attempt, start, reached, last)
		}
		cfg.log.Debug("rendezvous: dial failed, retrying", "addr", addr, "attempt", attempt, "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, dialGaveUp(ctx, addr, cfg, attempt, start, reached, last)
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// dialError is a failure to open the TCP connection (nothing listened, or the host
// could not be reached).
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dialGaveUp is Dial's error once ctx ended; when no attempt ever reached a listener it
// says that nobody served the store at addr.
func dialGaveUp(ctx context.Context, addr string, cfg clientConfig, attempts int, start time.Time, reached bool, last error) error {
	took := time.Since(start).Round(time.Millisecond)
	if !reached {
		what := "no server ever listened at " + addr
		if cfg.servedBy != "" {
			what = cfg.servedBy + " never served the store at " + addr
		}
		return fmt.Errorf("dial %s: %s: %w (%d attempts in %v, last: %w)", addr, what, ctx.Err(), attempts, took, last)
	}
	return fmt.Errorf("dial %s: %w (%d attempts in %v, last: %w)", addr, ctx.Err(), attempts, took, last)
}

func dialOnce(ctx context.Context, addr string, cfg clientConfig) (*Client, error) {
	// No TCP keepalives: the client pings the server itself (keepaliveEvery) and
	// declares it dead after silentAfter, and the setsockopt calls they take are a good
	// part of what a connection costs when thousands of ranks dial at once.
	d := net.Dialer{LocalAddr: cfg.localAddr, KeepAlive: -1}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{err}
	}
	if cfg.tls != nil {
		tc := cfg.tls.Clone()
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tc.ServerName = host
			}
		}
		nc = tls.Client(nc, tc)
	}
	deadline := time.Now().Add(DefaultHandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	c := &Client{addr: addr, nc: nc, log: cfg.log, pending: make(map[uint32]chan reply)}
	c.qcond = sync.NewCond(&c.qmu)
	br := bufio.NewReader(heardConn{c})
	idle, err := clientHandshake(nc, br, cfg.token)
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	c.idle = idle
	c.wg.Add(1)
	go c.readLoop(br)
	c.mu.Lock()
	c.pinger = time.AfterFunc(c.keepaliveEvery(), c.keepalive)
	c.mu.Unlock()
	return c, nil
}

// heardConn notes when bytes arrive from the server.
type heardConn struct{ c *Client }

func (h heardConn) Read(p []byte) (int, error) {
	n, err := h.c.nc.Read(p)
	if n > 0 {
		h.c.heard.Store(time.Now().UnixNano())
	}
	return n, err
}

// clientHandshake says hello, checks the server's proof and proves the token; it
// returns the server's idle timeout.
func clientHandshake(nc net.Conn, br *bufio.Reader, token string) (time.Duration, error) {
	var e encoder
	clientNonce := newNonce()
	e.begin(opHello, statusOK, 0)
	e.string(magic)
	e.bytes(binary.BigEndian.AppendUint16(nil, ProtocolVersion))
	e.bytes(clientNonce)
	if err := writeFrame(nc, &e); err != nil {
		return 0, err
	}
	var buf []byte
	f, err := readReply(br, &buf, opHello)
	if err != nil {
		return 0, err
	}
	if len(f.fields) != 5 || string(f.fields[0]) != magic || len(f.fields[1]) != 2 || len(f.fields[4]) != 4 {
		return 0, fmt.Errorf("%w: malformed hello reply with %d fields", ErrProtocol, len(f.fields))
	}
	idle := time.Duration(binary.BigEndian.Uint32(f.fields[4])) * time.Millisecond
	serverNonce, serverProof := f.fields[2], f.fields[3]
	switch {
	case len(serverNonce) == 0 && token == "":
		return idle, nil
	case len(serverNonce) == 0:
		return 0, fmt.Errorf("%w: a token is configured but the server does not authenticate", ErrUnauthorized)
	case token == "":
		return 0, fmt.Errorf("%w: the server requires a token and none is configured (set %s or use WithToken)", ErrUnauthorized, EnvToken)
	case len(serverNonce) != nonceLen:
		return 0, fmt.Errorf("%w: server nonce of %d bytes, want %d", ErrProtocol, len(serverNonce), nonceLen)
	case !validProof(serverProof, token, serverLabel, clientNonce, serverNonce):
		return 0, fmt.Errorf("%w: the server could not prove it knows the token", ErrUnauthorized)
	}
	e.begin(opAuth, statusOK, 0)
	e.bytes(proof(token, clientLabel, clientNonce, serverNonce))
	if err := writeFrame(nc, &e); err != nil {
		return 0, err
	}
	if _, err := readReply(br, &buf, opAuth); err != nil {
		return 0, err
	}
	return idle, nil
}

func writeFrame(nc net.Conn, e *encoder) error {
	b, err := e.finish()
	if err != nil {
		return err
	}
	_, err = nc.Write(b)
	return err
}

// readReply reads one handshake reply and turns a non-OK status into its error.
func readReply(br *bufio.Reader, buf *[]byte, want op) (frame, error) {
	body, b, err := readFrame(br, *buf, maxHandshakeFrame)
	*buf = b
	if err != nil {
		return frame{}, fmt.Errorf("reading %s reply: %w", want, err)
	}
	f, err := decodeFrame(body, nil)
	if err != nil {
		return frame{}, err
	}
	if f.status != statusOK {
		return frame{}, statusError(f.status, f.fields)
	}
	if f.op != want {
		return frame{}, fmt.Errorf("%w: expected a %s reply, got %s", ErrProtocol, want, f.op)
	}
	return f, nil
}

func statusError(st status, fields [][]byte) error {
	msg := "no reason given"
	if len(fields) > 0 {
		msg = string(fields[0][:min(len(fields[0]), 256)])
	}
	return fmt.Errorf("%w: %s", st.sentinel(), msg)
}

// readLoop hands each reply to the call waiting for its id.
func (c *Client) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	var buf []byte
	var fields [][]byte
	for {
		body, b, err := readFrame(br, buf, MaxFrameLen)
		buf = b
		if err != nil {
			c.fail(err)
			return
		}
		f, err := decodeFrame(body, fields)
		if err != nil {
			c.fail(err)
			return
		}
		fields = f.fields[:0]
		c.mu.Lock()
		ch := c.pending[f.id]
		delete(c.pending, f.id)
		c.mu.Unlock()
		if ch == nil {
			continue // a keepalive, or a call that gave up
		}
		r := reply{status: f.status}
		if len(f.fields) > 0 {
			// One copy for all fields: the read buffer is reused.
			n := 0
			for _, fd := range f.fields {
				n += len(fd)
			}
			backing := make([]byte, 0, n)
			r.fields = make([][]byte, len(f.fields))
			for i, fd := range f.fields {
				backing = append(backing, fd...)
				r.fields[i] = backing[len(backing)-len(fd) : len(backing) : len(backing)]
			}
		}
		ch <- r
		if cap(buf) > readChunk {
			buf = nil
		}
	}
}

// keepalive runs from a timer every keepaliveEvery: it declares the server dead when
// nothing arrived from it for silentAfter, and otherwise sends a ping (id 0, whose
// reply is dropped) unless another write is under way. It never waits for the
// connection, so a frozen server cannot stop it.
func (c *Client) keepalive() {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.wg.Add(1) // the reader is still counted, see cancelOnServer
	c.pinger.Reset(c.keepaliveEvery())
	c.mu.Unlock()
	defer c.wg.Done()
	if silence := time.Since(time.Unix(0, c.heard.Load())); silence > c.silentAfter() {
		c.fail(fmt.Errorf("%w: %w: the store at %s has been silent for %v (a store that answers no keepalive for %v is declared dead)",
			ErrClosed, ErrUnresponsive, c.addr, silence.Round(time.Millisecond), c.silentAfter()))
		return
	}
	if !c.wmu.TryLock() {
		return // a request is being written; the next tick pings
	}
	defer c.wmu.Unlock()
	c.ping.begin(opPing, statusOK, 0)
	b, err := c.ping.finish()
	if err != nil {
		return
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.silentAfter()))
	if _, err := c.nc.Write(b); err != nil {
		c.fail(err)
	}
}

// keepaliveEvery is a third of the server's idle timeout (of the default one when the
// server has none).
func (c *Client) keepaliveEvery() time.Duration {
	idle := c.idle
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	return max(idle/3, minKeepalive)
}

// silentAfter is how long the server may send nothing before the client declares it
// dead: three keepalive intervals, at least minSilence.
func (c *Client) silentAfter() time.Duration { return max(3*c.keepaliveEvery(), minSilence) }

// fail stops the client: the connection is closed and every pending call gets err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w: connection to %s lost: %w", ErrClosed, c.addr, err)
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	if c.pinger != nil {
		c.pinger.Stop()
	}
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, ch := range pending {
		ch <- reply{err: err}
	}
}

// Close closes the connection; pending calls fail with ErrClosed. It returns once the
// client's goroutines have ended and is safe to call more than once.
func (c *Client) Close() error {
	if c.nc == nil {
		return nil
	}
	c.fail(fmt.Errorf("%w: client closed", ErrClosed))
	c.wg.Wait()
	return nil
}

// write encodes and sends one frame. Frames of calls made while another call writes
// wait in a queue, and that call sends them all in one write once its own is out: the
// requests a caller makes together (a rank's join) cost one system call, not one each.
// A write gets the earliest deadline of the frames it carries. A write that fails or
// times out may have sent part of a frame, so it ends the client.
func (c *Client) write(ctx context.Context, build func(*encoder)) error {
	c.qmu.Lock()
	build(&c.enc)
	b, err := c.enc.finish()
	if err != nil {
		c.qmu.Unlock()
		return err
	}
	c.queue = append(c.queue, b...)
	if cap(c.enc.b) > readChunk {
		c.enc.b = nil
	}
	if dl, ok := ctx.Deadline(); ok && (c.qdl.IsZero() || dl.Before(c.qdl)) {
		c.qdl = dl
	}
	c.queued++
	mine := c.queued
	if c.writing {
		for c.sent < mine {
			c.qcond.Wait()
		}
		return c.writeFailureLocked()
	}
	c.writing = true
	// Let the calls started together with this one queue their frames first.
	c.qmu.Unlock()
	runtime.Gosched()
	c.qmu.Lock()
	for c.sent < c.queued {
		buf, upTo, dl := c.queue, c.queued, c.qdl
		c.queue, c.spare, c.qdl = c.spare[:0], nil, time.Time{}
		c.qmu.Unlock()
		c.wmu.Lock()
		_ = c.nc.SetWriteDeadline(dl)
		_, err := c.nc.Write(buf)
		c.wmu.Unlock()
		if err != nil {
			c.fail(err)
		}
		c.qmu.Lock()
		c.wfailed = c.wfailed || err != nil
		if cap(buf) <= readChunk {
			c.spare = buf[:0]
		}
		c.sent = upTo
		c.qcond.Broadcast()
	}
	c.writing = false
	return c.writeFailureLocked()
}

// writeFailureLocked unlocks qmu and returns the client's failure if a write failed,
// else nil: a frame that was written is answered by its reply or by the failure that
// ends the client, not by a failure that came after it was sent (its reply may have
// arrived before the connection closed).
func (c *Client) writeFailureLocked() error {
	failed := c.wfailed
	c.qmu.Unlock()
	if !failed {
		return nil
	}
	return c.failure()
}

// failure is why the client stopped, nil while it works.
func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// call sends one request and waits for its reply. blocking marks a Get or Wait, which
// is cancelled on the server when ctx ends first.
func (c *Client) call(ctx context.Context, o op, blocking bool, build func(*encoder)) (reply, error) {
	p, err := c.start(ctx, o, blocking, build)
	if err != nil {
		return reply{}, err
	}
	return p.await(ctx)
}

// inflight is a request sent and not yet answered; requests started one after the other
// are pipelined and the server handles them in that order.
type inflight struct {
	c        *Client
	id       uint32
	ch       chan reply
	blocking bool
}

// start sends one request without waiting for its reply.
func (c *Client) start(ctx context.Context, o op, blocking bool, build func(*encoder)) (inflight, error) {
	if err := ctx.Err(); err != nil {
		return inflight{}, err
	}
	if c.nc == nil {
		return inflight{}, fmt.Errorf("%w: client not created by Dial", ErrClosed)
	}
	id := c.nextID.Add(1)
	if id == 0 {
		id = c.nextID.Add(1)
	}
	p := inflight{c: c, id: id, ch: make(chan reply, 1), blocking: blocking}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return inflight{}, err
	}
	c.pending[id] = p.ch
	c.mu.Unlock()
	err := c.write(ctx, func(e *encoder) {
		e.begin(o, statusOK, id)
		build(e)
	})
	if err != nil {
		c.forget(id)
		return inflight{}, err
	}
	return p, nil
}

// await waits for the reply or for ctx to end.
func (p inflight) await(ctx context.Context) (reply, error) {
	select {
	case r := <-p.ch:
		return r.result()
	case <-ctx.Done():
		if !p.c.forget(p.id) {
			// The reply won the race with ctx: report what the server did.
			return (<-p.ch).result()
		}
		if p.blocking {
			p.c.cancelOnServer(p.id)
		}
		return reply{}, ctx.Err()
	}
}

func (r reply) result() (reply, error) {
	switch {
	case r.err != nil:
		return reply{}, r.err
	case r.status != statusOK:
		return reply{}, statusError(r.status, r.fields)
	}
	return r, nil
}

// cancelOnServer tells the server to forget a blocked request, from a goroutine so that
// a caller whose context has ended never waits on the connection.
func (c *Client) cancelOnServer(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return // the connection is gone, and the server forgets with it
	}
	// The reader goroutine is still counted in c.wg (it counts itself out only after
	// fail set c.err), so this Add cannot race with Close's Wait.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = c.write(context.Background(), func(e *encoder) { e.begin(opCancel, statusOK, id) })
	}()
}

// forget drops a pending call and reports whether it was still pending.
func (c *Client) forget(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pending[id]
	delete(c.pending, id)
	return ok
}

func checkKeys(keys []string) error {
	if len(keys) > MaxKeysPerRequest {
		return fmt.Errorf("%w: %d keys exceed the limit of %d", ErrInvalidArgument, len(keys), MaxKeysPerRequest)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	return nil
}

// Set stores value under key, replacing any value, and wakes every Get and Wait for
// key.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	if err := checkValue(value); err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	if _, err := c.call(ctx, opSet, false, func(e *encoder) { e.string(key); e.bytes(value) }); err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	return nil
}

// Get returns the value of key, waiting until some client sets it or ctx ends.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	r, err := c.call(ctx, opGet, true, func(e *encoder) { e.string(key) })
	if err != nil {
		return nil, fmt.Errorf("get %q from %s: %w", key, c.addr, err)
	}
	if len(r.fields) != 1 {
		return nil, fmt.Errorf("get %q: %w: reply with %d fields", key, ErrProtocol, len(r.fields))
	}
	return r.fields[0], nil
}

// Add adds delta to the counter under key (a missing key counts as 0) and returns the
// new value, atomically with respect to every other client. The value is stored as
// decimal text, so Get returns e.g. "3"; Add on a key holding anything else fails with
// ErrNotCounter, and so does an Add that would overflow int64.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, fmt.Errorf("add %d to %q: %w", delta, key, err)
	}
	r, err := c.call(ctx, opAdd, false, func(e *encoder) { e.string(key); e.uint64(uint64(delta)) })
	if err != nil {
		return 0, fmt.Errorf("add %d to %q: %w", delta, key, err)
	}
	if len(r.fields) != 1 || len(r.fields[0]) != 8 {
		return 0, fmt.Errorf("add %d to %q: %w: malformed reply", delta, key, ErrProtocol)
	}
	return int64(binary.BigEndian.Uint64(r.fields[0])), nil
}

// Wait returns once every key exists, or when ctx ends. With no keys it returns at
// once.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	if err := checkKeys(keys); err != nil {
		return fmt.Errorf("wait for %d keys: %w", len(keys), err)
	}
	_, err := c.call(ctx, opWait, true, func(e *encoder) {
		for _, k := range keys {
			e.string(k)
		}
	})
	if err != nil {
		if len(keys) == 1 {
			return fmt.Errorf("wait for %q on %s: %w", keys[0], c.addr, err)
		}
		return fmt.Errorf("wait for %d keys (%q, ...) on %s: %w", len(keys), keys[0], c.addr, err)
	}
	return nil
}

// Check reports, without waiting, which of keys exist.
func (c *Client) Check(ctx context.Context, keys ...string) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if err := checkKeys(keys); err != nil {
		return nil, fmt.Errorf("check %d keys: %w", len(keys), err)
	}
	r, err := c.call(ctx, opCheck, false, func(e *encoder) {
		for _, k := range keys {
			e.string(k)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("check %d keys: %w", len(keys), err)
	}
	if len(r.fields) != 1 || len(r.fields[0]) != len(keys) {
		return nil, fmt.Errorf("check %d keys: %w: malformed reply", len(keys), ErrProtocol)
	}
	out := make([]bool, len(keys))
	for i, b := range r.fields[0] {
		out[i] = b == 1
	}
	return out, nil
}

// CompareAndSet stores new under key if the key's value equals old, atomically. A nil
// old means "only if the key does not exist" (a non-nil empty old matches an existing
// empty value). It returns the key's value after the operation (nil if the key does not
// exist) and whether it stored new.
func (c *Client) CompareAndSet(ctx context.Context, key string, old, new []byte) (current []byte, swapped bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, fmt.Errorf("compare-and-set %q: %w", key, err)
	}
	if err := checkValue(new); err != nil {
		return nil, false, fmt.Errorf("compare-and-set %q: %w", key, err)
	}
	if err := checkValue(old); err != nil {
		return nil, false, fmt.Errorf("compare-and-set %q: expected %w", key, err)
	}
	r, err := c.call(ctx, opCAS, false, func(e *encoder) {
		e.string(key)
		if old != nil {
			e.bytes(old)
		}
		e.bytes(new)
	})
	if err != nil {
		return nil, false, fmt.Errorf("compare-and-set %q: %w", key, err)
	}
	if len(r.fields) != 2 || len(r.fields[0]) != 1 {
		return nil, false, fmt.Errorf("compare-and-set %q: %w: malformed reply", key, ErrProtocol)
	}
	flags := r.fields[0][0]
	if flags&2 != 0 {
		current = r.fields[1]
	}
	return current, flags&1 != 0, nil
}

// Delete removes key and reports whether it existed.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("delete %q: %w", key, err)
	}
	r, err := c.call(ctx, opDelete, false, func(e *encoder) { e.string(key) })
	if err != nil {
		return false, fmt.Errorf("delete %q: %w", key, err)
	}
	if len(r.fields) != 1 || len(r.fields[0]) != 1 {
		return false, fmt.Errorf("delete %q: %w: malformed reply", key, ErrProtocol)
	}
	return r.fields[0][0] == 1, nil
}
