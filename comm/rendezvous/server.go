package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"
)

// closeFlushTimeout bounds how long Close spends writing each reply already due.
const closeFlushTimeout = time.Second

// maxPendingBytes bounds what one connection's blocked Gets and Waits may hold on the
// server (their keys plus a fixed overhead each).
const maxPendingBytes = 4 << 20

// watcherOverhead is what a blocked request costs beyond its keys, for maxPendingBytes.
const watcherOverhead = 64

// Server is the key-value store. Rank 0 usually embeds one (NewServer, then Serve or
// ListenAndServe); tools/rendezvous runs one on its own. It serves any number of
// listeners and clients until Close or until a Serve context ends. The zero value is a
// server with the default settings.
type Server struct {
	once sync.Once // fills in a zero Server
	cfg  serverConfig
	log  *slog.Logger
	done chan struct{} // closed by Close

	wg         sync.WaitGroup // Serve loops and connections still running
	deliveries sync.WaitGroup // replies to blocked requests not yet written

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*serverConn]struct{}
	data      map[string][]byte
	size      int64 // bytes of keys and values in data
	watchers  map[string]map[*watcher]struct{}
	torch     torchWaiters // waits of PyTorch TCPStore clients (tcpstore_core.go)
}

// watcher is a blocked Get or Wait.
type watcher struct {
	conn    *serverConn
	id      uint32
	op      op
	keys    []string
	missing int // registered keys not yet set
	cost    int
}

// delivery is the reply to a watcher whose keys now all exist.
type delivery struct {
	w     *watcher
	value []byte // for a Get
}

// NewServer returns a server configured by opts; it listens nowhere until Serve or
// ListenAndServe.
func NewServer(opts ...ServerOption) *Server {
	s := &Server{}
	s.init(opts)
	return s
}

func (s *Server) init(opts []ServerOption) {
	s.once.Do(func() {
		s.cfg = serverConfig{
			handshakeTimeout: DefaultHandshakeTimeout,
			idleTimeout:      DefaultIdleTimeout,
			maxConns:         DefaultMaxConns,
			maxStoreBytes:    DefaultMaxStoreBytes,
		}
		for _, o := range opts {
			if o != nil {
				o.applyServer(&s.cfg)
			}
		}
		if s.cfg.log == nil {
			s.cfg.log = slog.Default()
		}
		s.log = s.cfg.log
		s.done = make(chan struct{})
		s.listeners = make(map[net.Listener]struct{})
		s.conns = make(map[*serverConn]struct{})
		s.data = make(map[string][]byte)
		s.watchers = make(map[string]map[*watcher]struct{})
	})
}

// ListenAndServe listens on the TCP address addr (":29500", "127.0.0.1:0") and serves
// it like Serve.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	s.init(nil)
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("rendezvous server: listen on %q: %w", addr, err)
	}
	return s.Serve(ctx, l)
}

// Serve accepts connections on l until Close or until ctx ends, which closes the whole
// server. It returns nil when stopped that way, ErrClosed when the server was already
// closed, and the listener's error when accepting fails for good. Serve takes ownership
// of l and closes it.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if l == nil {
		return fmt.Errorf("rendezvous server: %w: nil listener", ErrInvalidArgument)
	}
	s.init(nil)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return fmt.Errorf("rendezvous server: serve on %s: %w", l.Addr(), ErrClosed)
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		_ = l.Close()
	}()

	s.log.Info("rendezvous server listening", "addr", l.Addr().String(), "auth", s.cfg.token != "")
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("rendezvous server: accept on %s: %w", l.Addr(), err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("rendezvous server: accept failed, retrying", "addr", l.Addr().String(), "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-s.done:
				return nil
			}
		}
		delay = 0
		s.accept(nc)
	}
}

// Close stops every listener, writes the replies already due to Gets and Waits whose
// keys were set (allowing each at most a second), closes every connection
// (blocked Gets and Waits on the clients then fail), and returns once all the server's
// goroutines have ended. It is safe to call more than once and from any goroutine.
func (s *Server) Close() error {
	s.init(nil)
	s.mu.Lock()
	var listeners []net.Listener
	var conns []net.Conn
	if !s.closed {
		s.closed = true
		close(s.done)
		for l := range s.listeners {
			listeners = append(listeners, l)
		}
		for c := range s.conns {
			conns = append(conns, c.nc)
		}
	}
	s.mu.Unlock()
	for _, l := range listeners {
		_ = l.Close()
	}
	flush := time.Now().Add(closeFlushTimeout)
	for _, nc := range conns {
		_ = nc.SetWriteDeadline(flush)
	}
	s.deliveries.Wait()
	for _, nc := range conns {
		_ = nc.Close()
	}
	s.wg.Wait()
	return nil
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// numConns reports open connections (for tests).
func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) accept(nc net.Conn) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	if len(s.conns) >= s.cfg.maxConns {
		s.mu.Unlock()
		s.log.Warn("rendezvous server: connection refused: limit reached", "remote", nc.RemoteAddr().String(), "limit", s.cfg.maxConns)
		c := &serverConn{s: s, nc: nc}
		_ = c.reply(0, opHello, statusBusy, []byte("server at its limit of "+strconv.Itoa(s.cfg.maxConns)+" connections"))
		_ = nc.Close()
		return
	}
	c := &serverConn{s: s, nc: nc, remote: nc.RemoteAddr().String(), pending: make(map[uint32]*watcher)}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go c.serve()
}

// serverConn is one client connection. Its goroutine reads and answers requests in
// order; replies to blocked requests are written later by the goroutine that made their
// keys exist.
type serverConn struct {
	s      *Server
	nc     net.Conn
	remote string
	br     *bufio.Reader
	buf    []byte
	fields [][]byte

	wmu sync.Mutex
	enc encoder

	// Guarded by s.mu.
	pending      map[uint32]*watcher
	pendingBytes int
	gone         bool
}

func (c *serverConn) serve() {
	s := c.s
	defer s.wg.Done()
	defer c.close()
	c.br = bufio.NewReader(c.nc)
	if gen, err := c.sniffTorch(); err != nil || gen != 0 {
		if err != nil {
			c.logEnd("handshake", err)
		} else {
			c.serveTorch(gen)
		}
		return
	}
	if err := c.handshake(); err != nil {
		c.logEnd("handshake", err)
		return
	}
	for {
		if s.cfg.idleTimeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(s.cfg.idleTimeout))
		}
		body, buf, err := readFrame(c.br, c.buf, MaxFrameLen)
		c.buf = buf
		if err != nil {
			c.logEnd("read", err)
			return
		}
		f, err := decodeFrame(body, c.fields)
		if err != nil {
			c.logEnd("decode", err)
			return
		}
		c.fields = f.fields[:0]
		if err := c.handle(f); err != nil {
			c.logEnd(f.op.String(), err)
			return
		}
		if cap(c.buf) > readChunk {
			c.buf = nil
		}
		if cap(c.fields) > 64 {
			c.fields = nil
		}
	}
}

func (c *serverConn) logEnd(stage string, err error) {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		c.s.log.Debug("rendezvous server: client disconnected", "remote", c.remote)
	case c.s.isClosed() || errors.Is(err, net.ErrClosed):
		c.s.log.Debug("rendezvous server: connection closed", "remote", c.remote, "stage", stage)
	case errors.As(err, &ne) && ne.Timeout():
		c.s.log.Warn("rendezvous server: closing silent connection", "remote", c.remote, "stage", stage, "err", err)
	default:
		c.s.log.Warn("rendezvous server: closing connection", "remote", c.remote, "stage", stage, "err", err)
	}
}

func (c *serverConn) close() {
	s := c.s
	s.mu.Lock()
	c.gone = true
	for _, w := range c.pending {
		s.dropWatcherLocked(w)
	}
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.nc.Close()
}

// readSmall reads one handshake frame.
func (c *serverConn) readSmall() (frame, error) {
	body, buf, err := readFrame(c.br, c.buf, maxHandshakeFrame)
	c.buf = buf
	if err != nil {
		return frame{}, err
	}
	return decodeFrame(body, c.fields)
}

func (c *serverConn) handshake() error {
	s := c.s
	_ = c.nc.SetDeadline(time.Now().Add(s.cfg.handshakeTimeout))
	f, err := c.readSmall()
	if err != nil {
		return fmt.Errorf("reading hello: %w", err)
	}
	if f.op != opHello || len(f.fields) != 3 || string(f.fields[0]) != magic || len(f.fields[1]) != 2 || len(f.fields[2]) != nonceLen {
		return fmt.Errorf("%w: expected a hello, got %s with %d fields", ErrProtocol, f.op, len(f.fields))
	}
	clientNonce := bytes.Clone(f.fields[2])
	if v := binary.BigEndian.Uint16(f.fields[1]); v != ProtocolVersion {
		msg := fmt.Sprintf("server speaks protocol version %d, client %d", ProtocolVersion, v)
		_ = c.reply(0, opHello, statusVersion, []byte(msg))
		return fmt.Errorf("%w: %s", ErrVersionMismatch, msg)
	}
	var serverNonce, serverProof []byte
	if s.cfg.token != "" {
		serverNonce = newNonce()
		serverProof = proof(s.cfg.token, serverLabel, clientNonce, serverNonce)
	}
	idle := binary.BigEndian.AppendUint32(nil, uint32(min(s.cfg.idleTimeout.Milliseconds(), math.MaxUint32)))
	version := binary.BigEndian.AppendUint16(nil, ProtocolVersion)
	if err := c.reply(0, opHello, statusOK, []byte(magic), version, serverNonce, serverProof, idle); err != nil {
		return err
	}
	if s.cfg.token != "" {
		f, err := c.readSmall()
		if err != nil {
			return fmt.Errorf("reading authentication: %w", err)
		}
		if f.op != opAuth || len(f.fields) != 1 {
			return fmt.Errorf("%w: expected authentication, got %s with %d fields", ErrProtocol, f.op, len(f.fields))
		}
		if !validProof(f.fields[0], s.cfg.token, clientLabel, clientNonce, serverNonce) {
			_ = c.reply(0, opAuth, statusUnauthorized, []byte("invalid token"))
			return fmt.Errorf("%w: the client's proof does not match the token", ErrUnauthorized)
		}
		if err := c.reply(0, opAuth, statusOK); err != nil {
			return err
		}
	}
	return c.nc.SetDeadline(time.Time{})
}

// reply writes one frame; safe from any goroutine.
func (c *serverConn) reply(id uint32, o op, st status, fields ...[]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.enc.begin(o, st, id)
	for _, f := range fields {
		c.enc.bytes(f)
	}
	b, err := c.enc.finish()
	if err != nil {
		return err
	}
	timeout := writeTimeout
	select {
	case <-c.s.done:
		timeout = closeFlushTimeout
	default:
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err = c.nc.Write(b)
	if cap(c.enc.b) > readChunk {
		c.enc.b = nil
	}
	return err
}

func (c *serverConn) fail(f frame, st status, format string, args ...any) error {
	return c.reply(f.id, f.op, st, fmt.Appendf(nil, format, args...))
}

func badFields(f frame) error {
	return fmt.Errorf("%w: %s with %d fields", ErrProtocol, f.op, len(f.fields))
}

// keyOK checks a key field without copying it.
func keyOK(b []byte) error {
	if len(b) == 0 || len(b) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrProtocol, len(b), MaxKeyLen)
	}
	return nil
}

func keyField(b []byte) (string, error) {
	if err := keyOK(b); err != nil {
		return "", err
	}
	return string(b), nil
}

func keyFields(fs [][]byte) ([]string, error) {
	keys := make([]string, len(fs))
	for i, b := range fs {
		k, err := keyField(b)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// handle answers one request. It returns an error only for a protocol violation or a
// failed write, which close the connection.
func (c *serverConn) handle(f frame) error {
	s := c.s
	switch f.op {
	case opPing:
		return c.reply(f.id, f.op, statusOK)

	case opSet:
		if len(f.fields) != 2 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		s.mu.Lock()
		if !s.storeLocked(key, bytes.Clone(f.fields[1])) {
			s.mu.Unlock()
			return c.fail(f, statusStoreFull, "storing %d bytes under %q would exceed the store limit of %d bytes", len(f.fields[1]), key, s.cfg.maxStoreBytes)
		}
		out := s.notifyLocked(key)
		s.mu.Unlock()
		s.deliver(out)
		return c.reply(f.id, f.op, statusOK)

	case opGet:
		if len(f.fields) != 1 {
			return badFields(f)
		}
		if err := keyOK(f.fields[0]); err != nil {
			return err
		}
		s.mu.Lock()
		if v, ok := s.data[string(f.fields[0])]; ok {
			s.mu.Unlock()
			return c.reply(f.id, f.op, statusOK, v)
		}
		return c.block(f, []string{string(f.fields[0])})

	case opWait:
		if len(f.fields) == 0 || len(f.fields) > MaxKeysPerRequest {
			return badFields(f)
		}
		keys, err := keyFields(f.fields)
		if err != nil {
			return err
		}
		s.mu.Lock()
		return c.block(f, keys)

	case opAdd:
		if len(f.fields) != 2 || len(f.fields[1]) != 8 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		delta := int64(binary.BigEndian.Uint64(f.fields[1]))
		s.mu.Lock()
		var cur int64
		if v, ok := s.data[key]; ok {
			cur, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				s.mu.Unlock()
				return c.fail(f, statusNotCounter, "value of %q is not a decimal int64: %q", key, v[:min(len(v), 32)])
			}
		}
		if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
			s.mu.Unlock()
			return c.fail(f, statusNotCounter, "adding %d to %d under %q overflows int64", delta, cur, key)
		}
		cur += delta
		if !s.storeLocked(key, strconv.AppendInt(nil, cur, 10)) {
			s.mu.Unlock()
			return c.fail(f, statusStoreFull, "storing counter %q would exceed the store limit of %d bytes", key, s.cfg.maxStoreBytes)
		}
		out := s.notifyLocked(key)
		s.mu.Unlock()
		s.deliver(out)
		return c.reply(f.id, f.op, statusOK, binary.BigEndian.AppendUint64(nil, uint64(cur)))

	case opCAS:
		if len(f.fields) != 2 && len(f.fields) != 3 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		s.mu.Lock()
		cur, present := s.data[key]
		var swap bool
		if len(f.fields) == 2 {
			swap = !present
		} else {
			swap = present && bytes.Equal(cur, f.fields[1])
		}
		var out []delivery
		if swap {
			nv := bytes.Clone(f.fields[len(f.fields)-1])
			if !s.storeLocked(key, nv) {
				s.mu.Unlock()
				return c.fail(f, statusStoreFull, "storing %d bytes under %q would exceed the store limit of %d bytes", len(nv), key, s.cfg.maxStoreBytes)
			}
			cur, present = nv, true
			out = s.notifyLocked(key)
		}
		s.mu.Unlock()
		s.deliver(out)
		var flags byte
		if swap {
			flags |= 1
		}
		if present {
			flags |= 2
		}
		return c.reply(f.id, f.op, statusOK, []byte{flags}, cur)

	case opDelete:
		if len(f.fields) != 1 {
			return badFields(f)
		}
		key, err := keyField(f.fields[0])
		if err != nil {
			return err
		}
		s.mu.Lock()
		v, ok := s.data[key]
		if ok {
			delete(s.data, key)
			s.size -= int64(len(key) + len(v))
		}
		s.mu.Unlock()
		var deleted byte
		if ok {
			deleted = 1
		}
		return c.reply(f.id, f.op, statusOK, []byte{deleted})

	case opCheck:
		if len(f.fields) == 0 || len(f.fields) > MaxKeysPerRequest {
			return badFields(f)
		}
		present := make([]byte, len(f.fields))
		for _, b := range f.fields {
			if err := keyOK(b); err != nil {
				return err
			}
		}
		s.mu.Lock()
		for i, b := range f.fields {
			if _, ok := s.data[string(b)]; ok {
				present[i] = 1
			}
		}
		s.mu.Unlock()
		return c.reply(f.id, f.op, statusOK, present)

	case opCancel:
		if len(f.fields) != 0 {
			return badFields(f)
		}
		s.mu.Lock()
		if w := c.pending[f.id]; w != nil {
			s.dropWatcherLocked(w)
		}
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("%w: unexpected %s (status %d, id %d)", ErrProtocol, f.op, f.status, f.id)
}

// block answers a Get or Wait whose keys all exist, or registers a watcher for it. It
// is called with s.mu held and releases it.
func (c *serverConn) block(f frame, keys []string) error {
	s := c.s
	if _, dup := c.pending[f.id]; dup {
		s.mu.Unlock()
		return fmt.Errorf("%w: request id %d reused while still pending", ErrProtocol, f.id)
	}
	cost := watcherOverhead
	for _, k := range keys {
		cost += len(k)
	}
	if c.pendingBytes+cost > maxPendingBytes {
		s.mu.Unlock()
		return c.fail(f, statusInvalid, "blocked requests on this connection would hold %d bytes, over the limit of %d", c.pendingBytes+cost, maxPendingBytes)
	}
	w := &watcher{conn: c, id: f.id, op: f.op, keys: keys, cost: cost}
	s.watchMissingLocked(w)
	if w.missing == 0 {
		var v []byte
		if f.op == opGet {
			v = s.data[keys[0]]
		}
		s.mu.Unlock()
		if f.op == opGet {
			return c.reply(f.id, f.op, statusOK, v)
		}
		return c.reply(f.id, f.op, statusOK)
	}
	c.pending[f.id] = w
	c.pendingBytes += cost
	s.mu.Unlock()
	return nil
}

// watchMissingLocked registers w on each of its keys that does not exist yet and sets
// w.missing to their number.
func (s *Server) watchMissingLocked(w *watcher) {
	w.missing = 0
	for _, k := range w.keys {
		if _, ok := s.data[k]; ok {
			continue
		}
		set := s.watchers[k]
		if set == nil {
			set = make(map[*watcher]struct{})
			s.watchers[k] = set
		}
		if _, dup := set[w]; !dup {
			set[w] = struct{}{}
			w.missing++
		}
	}
}

// dropWatcherLocked forgets a watcher that will never be answered.
func (s *Server) dropWatcherLocked(w *watcher) {
	for _, k := range w.keys {
		if set := s.watchers[k]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.watchers, k)
			}
		}
	}
	w.conn.pendingBytes -= w.cost
	delete(w.conn.pending, w.id)
}

// storeLocked sets key to value unless that would exceed the store limit.
func (s *Server) storeLocked(key string, value []byte) bool {
	old, had := s.data[key]
	delta := int64(len(value)) - int64(len(old))
	if !had {
		delta += int64(len(key))
	}
	if delta > 0 && s.size+delta > s.cfg.maxStoreBytes {
		return false
	}
	s.data[key] = value
	s.size += delta
	return true
}

// notifyLocked wakes the watchers of a key that was just set and returns the replies
// of those whose keys now all exist.
func (s *Server) notifyLocked(key string) []delivery {
	s.torch.notifyLocked(key, s.data)
	set := s.watchers[key]
	if len(set) == 0 {
		return nil
	}
	delete(s.watchers, key)
	var out []delivery
	for w := range set {
		if w.missing--; w.missing > 0 {
			continue
		}
		// A key seen earlier may have been deleted since: look again.
		if s.watchMissingLocked(w); w.missing > 0 {
			continue
		}
		w.conn.pendingBytes -= w.cost
		delete(w.conn.pending, w.id)
		if s.closed || w.conn.gone {
			continue
		}
		d := delivery{w: w}
		if w.op == opGet {
			d.value = s.data[w.keys[0]]
		}
		out = append(out, d)
		s.deliveries.Add(1)
	}
	return out
}

// deliver writes the replies notifyLocked collected, each from its own goroutine so
// that a client that stops reading cannot delay the others.
func (s *Server) deliver(out []delivery) {
	for _, d := range out {
		go func() {
			defer s.deliveries.Done()
			var err error
			if d.w.op == opGet {
				err = d.w.conn.reply(d.w.id, d.w.op, statusOK, d.value)
			} else {
				err = d.w.conn.reply(d.w.id, d.w.op, statusOK)
			}
			if err != nil {
				s.log.Warn("rendezvous server: closing connection: reply failed", "remote", d.w.conn.remote, "op", d.w.op.String(), "err", err)
				_ = d.w.conn.nc.Close()
			}
		}()
	}
}
