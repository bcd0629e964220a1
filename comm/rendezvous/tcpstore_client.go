package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// TCPStoreOption configures a TCPStoreClient (DialTCPStore).
type TCPStoreOption interface{ applyTCPStore(*tcpStoreConfig) }

type tcpStoreConfig struct {
	prefix   string
	protocol TorchProtocol
	log      *slog.Logger
	// localAddr is the address dialled from (WithLocalAddr).
	localAddr net.Addr
}

type tcpStoreOption func(*tcpStoreConfig)

func (o tcpStoreOption) applyTCPStore(c *tcpStoreConfig) { o(c) }

func (o LoggerOption) applyTCPStore(c *tcpStoreConfig) { c.log = o.l }

// WithKeyPrefix puts prefix before every key the way torch's PrefixStore does
// (prefix + "/" + key), so that a Go rank and the Python processes that use
// PrefixStore(prefix, store) see the same keys. torchrun's workers use
// "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>" (AgentStorePrefix).
func WithKeyPrefix(prefix string) TCPStoreOption {
	return tcpStoreOption(func(c *tcpStoreConfig) { c.prefix = prefix })
}

// WithTorchProtocol fixes the generation of torch's protocol instead of detecting it.
func WithTorchProtocol(p TorchProtocol) TCPStoreOption {
	return tcpStoreOption(func(c *tcpStoreConfig) { c.protocol = p })
}

// TCPStoreClient is a client of PyTorch's TCPStore (torch.distributed.TCPStore, the
// store torchrun's agent serves) or of an ncclgo Server, speaking torch's protocol of
// either generation (detected when dialing). It implements [Store], so a Go rank can
// use torchrun's store like its own. Keys get torch's "/" in front (and the
// WithKeyPrefix prefix), as Python's TCPStore does, so Python's store.get("k") reads
// what Set(ctx, "k", v) wrote.
//
// torch's protocol answers one request at a time per connection and cannot cancel a
// request on the server in generation 1, so the client keeps a small pool of
// connections: a call takes one (dialing when none is free) and gives it back when
// done; a call whose context ends closes its connection. It is safe for concurrent use.
//
// torch's protocol has no authentication and no keepalive; TCP keepalives detect a
// dead server.
type TCPStoreClient struct {
	addr     string
	prefix   string // wire prefix: "/" or "/" + prefix + "/"
	protocol TorchProtocol
	log      *slog.Logger
	local    net.Addr // dialled from (WithLocalAddr)

	mu       sync.Mutex
	closed   bool
	idle     []*tsConn
	open     map[*tsConn]struct{}
	barriers int8 // the server has its own barriers: 1 yes (ncclgo's), -1 no, 0 not asked yet

	afterSwap func() // for tests: runs between a creating COMPARE_SET and its wake-up on protocol 1
}

var _ Store = (*TCPStoreClient)(nil)

// maxIdleTCPStoreConns bounds the connections a TCPStoreClient keeps open between
// calls.
const maxIdleTCPStoreConns = 4

type tsConn struct {
	nc net.Conn
	rd tsReader
	w  tsWriter
}

// DialTCPStore connects to the TCPStore at addr ("host:port"). It retries refused
// connections until ctx ends (the store may not listen yet). Without
// WithTorchProtocol it tries generation 2 (validation and ping) first and, when the
// server closes the connection on that, generation 1.
func DialTCPStore(ctx context.Context, addr string, opts ...TCPStoreOption) (*TCPStoreClient, error) {
	cfg := tcpStoreConfig{}
	for _, o := range opts {
		if o != nil {
			o.applyTCPStore(&cfg)
		}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if addr == "" {
		return nil, fmt.Errorf("dial tcpstore: %w: empty address", ErrInvalidArgument)
	}
	if cfg.protocol < TorchProtocolAuto || cfg.protocol > TorchProtocol2 {
		return nil, fmt.Errorf("dial tcpstore %s: %w: protocol %d (want 0, 1 or 2)", addr, ErrInvalidArgument, cfg.protocol)
	}
	c := &TCPStoreClient{addr: addr, prefix: "/", log: cfg.log, local: cfg.localAddr, open: map[*tsConn]struct{}{}}
	if cfg.prefix != "" {
		c.prefix = "/" + cfg.prefix + "/"
	}
	delay := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tc, p, err := c.dialDetect(ctx, cfg.protocol)
		if err == nil {
			c.protocol = p
			c.idle = append(c.idle, tc)
			c.open[tc] = struct{}{}
			c.log.Debug("rendezvous: connected to a TCPStore", "addr", addr, "protocol", int(p), "prefix", cfg.prefix)
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial tcpstore %s: %w (%d attempts, last: %w)", addr, ctx.Err(), attempt, err)
		}
		c.log.Debug("rendezvous: tcpstore dial failed, retrying", "addr", addr, "attempt", attempt, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dial tcpstore %s: %w (%d attempts, last: %w)", addr, ctx.Err(), attempt, err)
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// Protocol is the generation of torch's protocol the client speaks.
func (c *TCPStoreClient) Protocol() TorchProtocol { return c.protocol }

// dialDetect opens a connection speaking p, or detects the generation.
func (c *TCPStoreClient) dialDetect(ctx context.Context, p TorchProtocol) (*tsConn, TorchProtocol, error) {
	if p != TorchProtocolAuto {
		tc, err := c.dialConn(ctx, p)
		return tc, p, err
	}
	tc, err := c.dialConn(ctx, TorchProtocol2)
	if err == nil {
		return tc, TorchProtocol2, nil
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "dial" {
		return nil, 0, err // nothing listens yet
	}
	c.log.Debug("rendezvous: tcpstore protocol 2 refused, trying 1", "addr", c.addr, "err", err)
	tc, err = c.dialConn(ctx, TorchProtocol1)
	return tc, TorchProtocol1, err
}

// dialConn connects and checks that the server answers protocol p: generation 2 by
// validation and ping, generation 1 by GETNUMKEYS.
func (c *TCPStoreClient) dialConn(ctx context.Context, p TorchProtocol) (*tsConn, error) {
	d := net.Dialer{LocalAddr: c.local}
	nc, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(DefaultHandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	tc := &tsConn{nc: nc, rd: tsReader{r: bufio.NewReader(nc)}}
	w := &tc.w
	c.mu.Lock()
	probe := c.barriers == 0 // ask with the handshake whether it is ncclgo's server
	c.mu.Unlock()
	if p == TorchProtocol2 {
		// The nonce's third byte is 0xff: a generation 1 server reads these bytes as
		// a SET whose key length is over 2^63 and closes the connection.
		nonce := 0xffff0000 | uint32(os.Getpid()&0xffff)
		w.u8(byte(tsValidate))
		w.u32(tsMagic)
		w.u8(byte(tsPing))
		w.u32(nonce)
		if probe {
			c.probeQuery(w, p)
		}
		_, err = nc.Write(w.bytes())
		var got uint32
		if err == nil {
			got, err = tc.rd.u32()
		}
		if err == nil && got != nonce {
			err = fmt.Errorf("%w: ping returned %#x, want %#x", ErrProtocol, got, nonce)
		}
	} else {
		q, _ := tsWire(p, tsNumKeys)
		w.u8(q)
		if probe {
			c.probeQuery(w, p)
		}
		if _, err = nc.Write(w.bytes()); err == nil {
			_, err = tc.rd.u64()
		}
	}
	if err == nil && probe {
		err = c.probeAnswer(tc)
	}
	w.reset()
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("tcpstore protocol %d handshake with %s: %w", p, c.addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// do runs one exchange on a pooled connection within ctx. Its errors say what failed:
// verb, and key quoted unless it is empty (built only on failure).
func (c *TCPStoreClient) do(ctx context.Context, verb, key string, fn func(tc *tsConn) error) (err error) {
	defer func() {
		if err != nil {
			what := verb
			if key != "" {
				what += " " + strconv.Quote(key)
			}
			err = fmt.Errorf("tcpstore %s: %w", what, err)
		}
	}()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	var tc *tsConn
	if n := len(c.idle); n > 0 {
		tc, c.idle = c.idle[n-1], c.idle[:n-1]
	}
	c.mu.Unlock()
	if tc == nil {
		var err error
		if tc, err = c.dialConn(ctx, c.protocol); err != nil {
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = tc.nc.Close()
			return ErrClosed
		}
		c.open[tc] = struct{}{}
		c.mu.Unlock()
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = tc.nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = tc.nc.SetDeadline(time.Unix(1, 0)) })
	tc.w.reset()
	err = fn(tc)
	interrupted := !stop()
	if err == nil && !interrupted {
		_ = tc.nc.SetDeadline(time.Time{})
		c.mu.Lock()
		if !c.closed && len(c.idle) < maxIdleTCPStoreConns {
			c.idle = append(c.idle, tc)
			tc = nil
		}
		c.mu.Unlock()
	}
	if tc != nil {
		// Its state is unknown (a reply may still come): never reuse it.
		c.drop(tc)
	}
	var ne net.Error
	if _, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() {
		<-ctx.Done() // the connection's deadline is ctx's: it ends now
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, ErrProtocol) || errors.Is(err, ErrInvalidArgument):
		return err
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}

func (c *TCPStoreClient) drop(tc *tsConn) {
	c.mu.Lock()
	delete(c.open, tc)
	c.mu.Unlock()
	_ = tc.nc.Close()
}

// query appends query q to tc's request.
func (c *TCPStoreClient) query(tc *tsConn, q tsQuery) error {
	b, ok := tsWire(c.protocol, q)
	if !ok {
		return fmt.Errorf("%w: %s is not in torch's protocol %d", ErrInvalidArgument, q, c.protocol)
	}
	tc.w.u8(b)
	return nil
}

func (tc *tsConn) send() error {
	_, err := tc.nc.Write(tc.w.bytes())
	tc.w.reset()
	return err
}

// Close closes every connection; calls in flight fail with ErrClosed.
func (c *TCPStoreClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	open := c.open
	c.open, c.idle = nil, nil
	c.mu.Unlock()
	for tc := range open {
		_ = tc.nc.Close()
	}
	return nil
}

// Set stores value under key. torch's SET has no reply, so Set follows it with a
// CHECK of the key on the same connection: when Set returns, the server has stored
// the value, and calls made on other connections see it.
func (c *TCPStoreClient) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	return c.do(ctx, "set", key, func(tc *tsConn) error {
		if err := c.query(tc, tsSet); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		tc.w.vec(value)
		return c.checkOn(tc, key)
	})
}

// checkOn sends a CHECK of key and reads its answer (an ordering round trip).
func (c *TCPStoreClient) checkOn(tc *tsConn, keys ...string) error {
	_, err := c.checkKeys(tc, keys)
	return err
}

func (c *TCPStoreClient) checkKeys(tc *tsConn, keys []string) (bool, error) {
	if err := c.query(tc, tsCheck); err != nil {
		return false, err
	}
	tc.w.u64(uint64(len(keys)))
	for _, k := range keys {
		tc.w.prefixed(c.prefix, k)
	}
	if err := tc.send(); err != nil {
		return false, err
	}
	return readCheck(tc)
}

// readCheck reads the answer to a CHECK: whether its keys all exist.
func readCheck(tc *tsConn) (bool, error) {
	r, err := tc.rd.u8()
	if err != nil {
		return false, err
	}
	switch r {
	case tsReady:
		return true, nil
	case tsNotReady:
		return false, nil
	}
	return false, fmt.Errorf("%w: CHECK answered %d", ErrProtocol, r)
}

func (c *TCPStoreClient) waitOn(tc *tsConn, keys []string) error {
	if err := c.query(tc, tsWait); err != nil {
		return err
	}
	tc.w.u64(uint64(len(keys)))
	for _, k := range keys {
		tc.w.prefixed(c.prefix, k)
	}
	if err := tc.send(); err != nil {
		return err
	}
	r, err := tc.rd.u8()
	if err == nil && r != tsStopWaiting {
		err = fmt.Errorf("%w: WAIT answered %d", ErrProtocol, r)
	}
	return err
}

func (c *TCPStoreClient) getOn(tc *tsConn, key string) ([]byte, error) {
	if err := c.query(tc, tsGet); err != nil {
		return nil, err
	}
	tc.w.prefixed(c.prefix, key)
	if err := tc.send(); err != nil {
		return nil, err
	}
	return tc.rd.vector("value", MaxFrameLen)
}

// Get waits until key exists, then returns its value (torch's get does the same).
func (c *TCPStoreClient) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	var v []byte
	err := c.do(ctx, "get", key, func(tc *tsConn) error {
		if err := c.waitOn(tc, []string{key}); err != nil {
			return err
		}
		var err error
		v, err = c.getOn(tc, key)
		return err
	})
	return v, err
}

// Add adds delta to the decimal counter under key (absent: 0) and returns the result.
func (c *TCPStoreClient) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, fmt.Errorf("add to %q: %w", key, err)
	}
	var n int64
	err := c.do(ctx, "add to", key, func(tc *tsConn) error {
		if err := c.query(tc, tsAdd); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		tc.w.i64(delta)
		if err := tc.send(); err != nil {
			return err
		}
		v, err := tc.rd.u64()
		n = int64(v)
		return err
	})
	return n, err
}

// Wait returns once every key exists.
func (c *TCPStoreClient) Wait(ctx context.Context, keys ...string) error {
	if err := checkKeys(keys); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	verb := "wait for"
	if len(keys) > 1 {
		verb = fmt.Sprintf("wait for %d keys, the first", len(keys))
	}
	return c.do(ctx, verb, keys[0], func(tc *tsConn) error { return c.waitOn(tc, keys) })
}

// Check reports, for each key, whether it exists. torch's CHECK answers for all keys
// at once, so Check sends one CHECK per key in a single write.
func (c *TCPStoreClient) Check(ctx context.Context, keys ...string) ([]bool, error) {
	if err := checkKeys(keys); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	out := make([]bool, len(keys))
	err := c.do(ctx, "check", "", func(tc *tsConn) error {
		for _, k := range keys {
			if err := c.query(tc, tsCheck); err != nil {
				return err
			}
			tc.w.u64(1)
			tc.w.prefixed(c.prefix, k)
		}
		if err := tc.send(); err != nil {
			return err
		}
		for i := range keys {
			r, err := tc.rd.u8()
			if err != nil {
				return err
			}
			if r != tsReady && r != tsNotReady {
				return fmt.Errorf("%w: CHECK answered %d", ErrProtocol, r)
			}
			out[i] = r == tsReady
		}
		return nil
	})
	return out, err
}

// CompareAndSet sets key to new if its value is old, or, with old nil, if key does not
// exist; it returns the value now stored and whether this call stored it. torch's
// COMPARE_SET only returns the value now stored, so a key that already held new
// reports swapped, and an empty old means "absent" to torch as it does nil.
//
// torch's own server (1.x and 2.x) does not wake the Gets and Waits of a key that a
// COMPARE_SET creates, so on it a CompareAndSet that created key follows with a query
// that does wake them:
//   - protocol 2: an APPEND of nothing, which leaves any value as it is (a Delete of
//     key by another client between the two is undone: APPEND creates key empty);
//   - protocol 1, which has no APPEND: a SET of new, only once new is read back as
//     key's value (a COMPARE_SET of new to new, which reads atomically and changes
//     nothing, after a CHECK that tells an absent key from one holding new). A change
//     another client makes before the read-back is left alone (a SET woke the waiters
//     itself, a CompareAndSet of this package wakes them too), and so is a Delete
//     before the CHECK. The read-back and the SET are two queries, a round trip
//     apart: a change another client makes to key between the two is overwritten
//     with new, and a Delete between the CHECK and the SET is undone (key holds new
//     again). torch's protocol 1 has no conditional write that wakes waiters, so
//     that window cannot be closed.
func (c *TCPStoreClient) CompareAndSet(ctx context.Context, key string, old, new []byte) (current []byte, swapped bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, fmt.Errorf("compare-and-set %q: %w", key, err)
	}
	wake := false
	if len(old) == 0 {
		served, err := c.serverBarriers(ctx) // ncclgo's server wakes them itself
		if err != nil {
			return nil, false, fmt.Errorf("compare-and-set %q: %w", key, err)
		}
		wake = !served
	}
	err = c.do(ctx, "compare-and-set", key, func(tc *tsConn) error {
		if old == nil {
			// Look first, so that an existing key equal to new is not taken for a swap.
			exists, err := c.checkKeys(tc, []string{key})
			if err != nil {
				return err
			}
			if exists {
				current, err = c.getOn(tc, key)
				return err
			}
		}
		if err := c.query(tc, tsCompareSet); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		tc.w.vec(old)
		tc.w.vec(new)
		if err := tc.send(); err != nil {
			return err
		}
		current, err = tc.rd.vector("value", MaxFrameLen)
		swapped = err == nil && bytes.Equal(current, new)
		if !swapped || !wake {
			return err
		}
		if c.protocol == TorchProtocol2 {
			if err := c.query(tc, tsAppend); err != nil {
				return err
			}
			tc.w.prefixed(c.prefix, key)
			tc.w.vec(nil)
		} else {
			if c.afterSwap != nil {
				c.afterSwap()
			}
			if ours, err := c.stillHolds(tc, key, new); err != nil || !ours {
				return err
			}
			if err := c.query(tc, tsSet); err != nil {
				return err
			}
			tc.w.prefixed(c.prefix, key)
			tc.w.vec(new)
		}
		return c.checkOn(tc, key) // neither answers: a CHECK orders it before the return
	})
	return current, swapped, err
}

// stillHolds reports whether key holds value, on protocol 1, where a GET of an absent
// key makes torch's server drop the connection: a CHECK says whether key exists, and a
// COMPARE_SET of value to value reads its value atomically, changing nothing when key
// holds value or another one. For an absent key that COMPARE_SET stores nothing when
// value is not empty, and both go in one write; when value is empty it would create
// key, so it goes only once the CHECK has found key.
func (c *TCPStoreClient) stillHolds(tc *tsConn, key string, value []byte) (bool, error) {
	if err := c.query(tc, tsCheck); err != nil {
		return false, err
	}
	tc.w.u64(1)
	tc.w.prefixed(c.prefix, key)
	exists := true
	if len(value) == 0 {
		if err := tc.send(); err != nil {
			return false, err
		}
		if ok, err := readCheck(tc); err != nil || !ok {
			return false, err
		}
	}
	if err := c.query(tc, tsCompareSet); err != nil {
		return false, err
	}
	tc.w.prefixed(c.prefix, key)
	tc.w.vec(value)
	tc.w.vec(value)
	if err := tc.send(); err != nil {
		return false, err
	}
	if len(value) != 0 {
		var err error
		if exists, err = readCheck(tc); err != nil {
			return false, err
		}
	}
	cur, err := tc.rd.vector("value", MaxFrameLen)
	return err == nil && exists && bytes.Equal(cur, value), err
}

// Delete removes key and reports whether it existed.
func (c *TCPStoreClient) Delete(ctx context.Context, key string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("delete %q: %w", key, err)
	}
	var n uint64
	err := c.do(ctx, "delete", key, func(tc *tsConn) error {
		if err := c.query(tc, tsDelete); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		if err := tc.send(); err != nil {
			return err
		}
		var err error
		n, err = tc.rd.u64()
		return err
	})
	return n == 1, err
}

// Barrier returns once every rank in [0, world) has called it with the same key, or
// fails when ctx ends with a [*BarrierError] naming the ranks that never arrived.
//
// On ncclgo's server it is [Client.Barrier]: the server's own barriers (through an
// extension of torch's protocol only ncclgo's server answers), with their checks, so
// that ranks using either client meet. torch's own server has no barrier: there it is
// built from keys (a marker per rank, a counter under key+"/count" and key+"/done"),
// meeting the other TCPStoreClients.
func (c *TCPStoreClient) Barrier(ctx context.Context, key string, rank, world int) error {
	served, err := c.serverBarriers(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("barrier %q: %w", key, err)
	case !served:
		return storeBarrier(ctx, c, key, rank, world)
	case world < 1 || world > maxBarrierWorld:
		return fmt.Errorf("barrier %q: %w: world size %d, want 1..%d", key, ErrInvalidArgument, world, maxBarrierWorld)
	case rank < 0 || rank >= world:
		return fmt.Errorf("barrier %q: %w: rank %d outside [0, %d)", key, ErrInvalidArgument, rank, world)
	}
	if err := checkKey(key); err != nil {
		return fmt.Errorf("barrier %q: %w", key, err)
	}
	err = c.do(ctx, "barrier", key, func(tc *tsConn) error {
		if err := c.query(tc, tsBarrier); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		tc.w.u64(uint64(rank))
		tc.w.u64(uint64(world))
		if err := tc.send(); err != nil {
			return err
		}
		return readRefusal(tc)
	})
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		return fmt.Errorf("barrier %q on %s: %w", key, c.addr, err)
	}
	return barrierTimedOut(ctx, key, c.addr, world, err, c.missingRanks)
}

// readRefusal reads the first byte of the answer to a BARRIER or an ARRIVE: nil for
// 0, else the error that the code and the server's message that follow say.
func readRefusal(tc *tsConn) error {
	code, err := tc.rd.u8()
	if err != nil || code == 0 {
		return err
	}
	msg, err := tc.rd.vector("error", MaxValueLen)
	if err != nil {
		return err
	}
	switch code {
	case tsBarrierInvalid:
		return fmt.Errorf("%w: %s", ErrInvalidArgument, msg)
	case tsBarrierFull:
		return fmt.Errorf("%w: %s", ErrStoreFull, msg)
	case tsArriveNotCounter:
		return fmt.Errorf("%w: %s", ErrNotCounter, msg)
	}
	return fmt.Errorf("server: %s", msg)
}

// Arrive is [Client.Arrive] over torch's protocol: one request on ncclgo's server
// (an extension of the protocol that only ncclgo's server answers), with the same
// rules and errors, so that a bring-up's ranks meet in one round trip each whichever
// client they use. torch's own server has no countdown latch: there Arrive changes
// nothing and fails with an error wrapping errors.ErrUnsupported (ServesArrivals says
// so beforehand). When ctx ends first the connection is closed, which cancels the wait
// on the server; the arrival stays counted.
func (c *TCPStoreClient) Arrive(ctx context.Context, a Arrival) (Arrived, error) {
	if err := a.validate(); err != nil {
		return Arrived{}, fmt.Errorf("arrive at %q: %w", a.Done, err)
	}
	served, err := c.ServesArrivals(ctx)
	switch {
	case err != nil:
		return Arrived{}, fmt.Errorf("arrive at %q: %w", a.Done, err)
	case !served:
		return Arrived{}, fmt.Errorf("arrive at %q on %s: %w: torch's TCPStore server has no countdown latches", a.Done, c.addr, errors.ErrUnsupported)
	}
	var out Arrived
	err = c.do(ctx, "arrive at", a.Done, func(tc *tsConn) error {
		if err := c.query(tc, tsArrive); err != nil {
			return err
		}
		w := &tc.w
		w.prefixed(c.prefix, a.Done)
		w.vec(a.DoneValue)
		w.prefixed(c.prefix, a.Counter)
		w.u64(uint64(a.Target))
		w.u64(uint64(len(a.Create)))
		for _, kv := range a.Create {
			w.prefixed(c.prefix, kv.Key)
			w.vec(kv.Value)
		}
		w.u64(uint64(len(a.Read)))
		for _, k := range a.Read {
			w.prefixed(c.prefix, k)
		}
		if err := tc.send(); err != nil {
			return err
		}
		if err := readRefusal(tc); err != nil {
			return err
		}
		n, err := tc.rd.count("reply fields", MaxKeysPerRequest+1)
		if err != nil {
			return err
		}
		fields := make([][]byte, n)
		for i := range fields {
			if fields[i], err = tc.rd.vector("reply field", MaxFrameLen); err != nil {
				return err
			}
		}
		out, err = decodeArrived(fields, len(a.Create), len(a.Read))
		return err
	})
	if err != nil {
		return Arrived{}, err
	}
	return out, nil
}

// ServesArrivals reports whether the server answers Arrive: ncclgo's server does,
// torch's does not. The client knows it from its first connection's handshake.
func (c *TCPStoreClient) ServesArrivals(ctx context.Context) (bool, error) {
	return c.serverBarriers(ctx)
}

// serverBarriers reports whether the server has its own barriers (ncclgo's server),
// asking it once: a CHECK of tsBarrierProbe, which only ncclgo's server reports.
func (c *TCPStoreClient) serverBarriers(ctx context.Context) (bool, error) {
	c.mu.Lock()
	known := c.barriers
	c.mu.Unlock()
	if known != 0 {
		return known > 0, nil
	}
	err := c.do(ctx, "probe for barriers", "", func(tc *tsConn) error {
		c.probeQuery(&tc.w, c.protocol)
		if err := tc.send(); err != nil {
			return err
		}
		return c.probeAnswer(tc)
	})
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.barriers > 0, nil
}

// probeQuery appends the CHECK of tsBarrierProbe, which only ncclgo's server
// reports, in protocol p. Every connection's handshake carries it until the client
// knows the answer, so that knowing costs no round trip of its own.
func (c *TCPStoreClient) probeQuery(w *tsWriter, p TorchProtocol) {
	q, _ := tsWire(p, tsCheck)
	w.u8(q)
	w.u64(1)
	w.str(tsBarrierProbe) // as it is: no prefix
}

// probeAnswer reads the answer to probeQuery and records what it says.
func (c *TCPStoreClient) probeAnswer(tc *tsConn) error {
	served, err := readCheck(tc)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.barriers = -1
	if served {
		c.barriers = 1
	}
	c.mu.Unlock()
	return nil
}

// missingRanks asks ncclgo's server which ranks have not arrived at the barrier.
func (c *TCPStoreClient) missingRanks(ctx context.Context, key string, world int) ([]int, error) {
	var flags byte
	var w uint64
	var bitmap []byte
	err := c.do(ctx, "barrier state", key, func(tc *tsConn) error {
		if err := c.query(tc, tsBarrierState); err != nil {
			return err
		}
		tc.w.prefixed(c.prefix, key)
		if err := tc.send(); err != nil {
			return err
		}
		var err error
		if flags, err = tc.rd.u8(); err != nil {
			return err
		}
		if w, err = tc.rd.u64(); err != nil {
			return err
		}
		bitmap, err = tc.rd.vector("bitmap", maxBarrierWorld/8)
		return err
	})
	if err != nil {
		return nil, err
	}
	return missingFromState(key, world, flags, w, bitmap)
}

// AgentStorePrefix is the key prefix torchrun's workers use in the agent's store in
// the given restart (TORCHELASTIC_RESTART_COUNT): "/worker/attempt_<restart>".
func AgentStorePrefix(restart int) string { return "/worker/attempt_" + strconv.Itoa(restart) }
