package rendezvous

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// maxTorchWaits bounds the waits one torch connection may have pending (a torch
// client has at most one).
const maxTorchWaits = 64

// WithTorchClients says whether the server also answers clients that speak PyTorch's
// TCPStore protocol (torch.distributed.TCPStore of torch 1.x and 2.x, torchrun's
// workers) on its port, next to ncclgo's own protocol. torch's protocol has no
// authentication: anyone who can reach the port can read and write every key. So
// without the option a server answers torch clients only when it has no token; with a
// token it refuses them (closing the connection, with a warning) unless
// WithTorchClients(true) is given. WithTorchClients(false) refuses them always.
//
// A torch client must send its first query within the handshake timeout, in a
// handshake slot (WithMaxHandshakes) like any new connection; it then takes a slot of
// WithMaxConns and its connection's cost from the memory budget, and its keys and
// waits count against its share (WithMaxClientBytes). A query that has begun must
// arrive whole within the handshake timeout. Between queries a torch connection is
// exempt from the idle timeout, since torch's clients send no keepalive and may stay
// silent for as long as their job runs (TCP keepalives still detect a dead peer).
//
// With a token, torch clients are the server's unauthenticated connections and never
// keep a client that proves the token out: when the connection slots (or its host's,
// WithMaxHostConns) are full, such a client takes the slot of the torch connection
// idle the longest, one with no WAIT pending first, and that connection is closed.
func WithTorchClients(allow bool) ServerOption {
	return serverOption(func(c *serverConfig) {
		c.torchClients = -1
		if allow {
			c.torchClients = 1
		}
	})
}

// DefaultMaxTorchValueBytes is the longest value a PyTorch TCPStore client may send
// unless WithMaxTorchValueBytes says otherwise: 1 MiB, as for ncclgo's own clients.
const DefaultMaxTorchValueBytes = MaxValueLen

// WithMaxTorchValueBytes sets the longest value a PyTorch TCPStore client may store
// (SET, COMPARE_SET, APPEND's result, MULTI_SET, QUEUE_PUSH; default 1 MiB,
// DefaultMaxTorchValueBytes). torch's own server has no such limit, and its protocol
// no error reply: a client that sends a longer value is disconnected (its next call
// fails with "Connection reset by peer" or "Failed to recv") and the server logs a
// warning naming the limit and this option. Values still count against the memory
// budget and the client's share (WithMaxStoreBytes, WithMaxClientBytes). ncclgo's own
// protocol keeps MaxValueLen. Zero or negative keeps the default.
func WithMaxTorchValueBytes(n int) ServerOption {
	return serverOption(func(c *serverConfig) {
		if n > 0 {
			c.maxTorchValue = n
		}
	})
}

func (s *Server) maxTorchValue() int {
	if s.cfg.maxTorchValue > 0 {
		return s.cfg.maxTorchValue
	}
	return DefaultMaxTorchValueBytes
}

// tsValueLimitError is a value from a torch client over WithMaxTorchValueBytes.
type tsValueLimitError struct {
	what  string
	n     uint64
	limit int
}

func (e *tsValueLimitError) Error() string {
	return fmt.Sprintf("%v: %s: %d bytes, over the limit of %d (WithMaxTorchValueBytes)", ErrInvalidArgument, e.what, e.n, e.limit)
}

func (e *tsValueLimitError) Unwrap() error { return ErrInvalidArgument }

// tsUnknownQueryError is a query byte no torch up to 2.14 sends in its generation.
type tsUnknownQueryError struct {
	gen TorchProtocol
	b   byte
}

func (e *tsUnknownQueryError) Error() string {
	return fmt.Sprintf("%v: query %d of protocol %d is not served (%s)", ErrProtocol, e.b, e.gen, e.torch())
}

func (e *tsUnknownQueryError) Unwrap() error { return ErrProtocol }

// torch says which torch the query belongs to, as far as ncclgo knows.
func (e *tsUnknownQueryError) torch() string {
	switch {
	case e.gen == TorchProtocol1 && e.b == 7:
		return "WATCH_KEY of torch 1.x, sent by C++'s watchKey only"
	case e.gen == TorchProtocol1:
		return "in no torch's protocol 1 (torch 1.x, early 2.x)"
	}
	return "not in torch's protocol 2 up to 2.14: a newer torch's, or not a torch client"
}

// logTorchEnd logs why a torch connection ended: a value over the limit and an unknown
// query get a warning that says what to do (an unknown query once per server).
func (c *serverConn) logTorchEnd(stage string, err error) {
	s := c.s
	var vl *tsValueLimitError
	var uq *tsUnknownQueryError
	switch {
	case errors.As(err, &vl):
		s.warn("rendezvous server: closing a PyTorch TCPStore connection that sent a value over the limit (torch's protocol has no error reply): raise it with rendezvous.WithMaxTorchValueBytes or tools/rendezvous -max-torch-value-bytes",
			"remote", c.remote, "what", vl.what, "bytes", vl.n, "limit", vl.limit)
	case errors.As(err, &uq):
		if _, seen := s.torchUnknown.LoadOrStore([2]byte{byte(uq.gen), uq.b}, true); seen {
			s.log.Debug("rendezvous server: closing a PyTorch TCPStore connection: unknown query", "remote", c.remote, "query", uq.b, "protocol", int(uq.gen))
			return
		}
		s.log.Warn("rendezvous server: closing a PyTorch TCPStore connection: its query is not served (logged once per query; README lists the torch versions served whole)",
			"remote", c.remote, "query", uq.b, "protocol", int(uq.gen), "torch", uq.torch())
	default:
		c.logEnd(stage, err)
	}
}

func (s *Server) torchAllowed() bool {
	switch s.cfg.torchClients {
	case 1:
		return true
	case -1:
		return false
	}
	return s.cfg.token == ""
}

// sniffTorch looks at a new connection's first bytes (within the handshake timeout)
// and returns the TCPStore generation its client speaks, or 0 for ncclgo's protocol.
func (c *serverConn) sniffTorch() (TorchProtocol, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.handshakeTimeout))
	b, err := c.br.Peek(1)
	if err != nil {
		return 0, err
	}
	switch {
	case b[0] >= 1 && b[0] <= byte(tsCancelWait):
		return TorchProtocol1, nil
	case b[0] != 0:
		return 0, nil
	}
	if b, err = c.br.Peek(5); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil // too short for anyone: let the handshake report it
		}
		return 0, err
	}
	// After a 0: generation 2's magic, or generation 1's SET and the low bytes of its
	// key's length (1..MaxKeyLen+1), or ncclgo's frame length, whose fifth byte is a
	// non-zero op (so read as a key length it is at least 2^24).
	switch l := binary.LittleEndian.Uint32(b[1:5]); {
	case l == tsMagic:
		return TorchProtocol2, nil
	case l >= 1 && l <= MaxKeyLen+1:
		return TorchProtocol1, nil
	}
	return 0, nil
}

// serveTorch serves a connection whose client speaks torch's protocol.
func (c *serverConn) serveTorch(gen TorchProtocol) (parked bool) {
	s := c.s
	if !s.torchAllowed() {
		s.warn("rendezvous server: refusing a PyTorch TCPStore client: torch's protocol has no authentication and this store has a token (WithTorchClients(true) allows them)",
			"remote", c.remote, "protocol", int(gen))
		return false
	}
	s.log.Debug("rendezvous server: PyTorch TCPStore client", "remote", c.remote, "protocol", int(gen))
	// Answers wait in t.out until the connection has no more query bytes buffered, so
	// that queries sent together (a CHECK per key) are answered in one write
	// (heardReader runs t.beforeRead); Close writes the answers queued (t.flush).
	t := c.newTorch(gen)
	c.step = serveTorchConn
	t.armed = true // by sniffTorch: the first query must come within the handshake timeout
	return t.serve(false)
}

// newTorch gives c, whose client speaks generation gen of torch's protocol, the state
// of a torch connection: at its handshake, and when it wakes after idling without it
// (hibernate).
func (c *serverConn) newTorch(gen TorchProtocol) *torchConn {
	s := c.s
	t := &torchConn{c: c, core: torchStore{st: s.st, a: c.acct, maxValue: s.maxTorchValue()}, gen: gen}
	t.rd = tsReader{r: c.br, charge: t}
	s.mu.Lock()
	c.torch = t // an idle one may make room for newcomers (idleTorchLocked)
	c.torchGen = uint8(gen)
	s.mu.Unlock()
	return t
}

// hibernate lets go of the torch state of c, about to park, when nothing of it is
// pending (no wait, no answer to write, no buffer charged): a parked torch connection
// then costs its serverConn and socket, not its torch state too. It wakes with a new
// one (resume); it holds nothing a fresh one does not (wait ids restart with no wait
// pending, the read deadline is unset between queries).
func (c *serverConn) hibernate() {
	t := c.torch
	if t == nil {
		return
	}
	t.wmu.Lock() // an answer being written finishes first
	idle := len(t.out) == 0 && t.rd.held == 0 && !t.inQuery && !t.armed
	t.wmu.Unlock()
	if !idle || !t.settled() {
		return
	}
	c.s.mu.Lock()
	c.torch = nil
	c.s.mu.Unlock()
}

// settled reports whether t has no wait pending and no fired wait left to answer.
func (t *torchConn) settled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waits) == 0 && len(t.fired) == 0
}

// hibernateParked is hibernate for t, the state of c, from the goroutine that has
// just written the answers of its fired waits (t.wmu held): a connection parked with a
// wait pending (the barrier or the WAIT for every rank's key of a bring-up) lets go
// of its state once the wait is answered, not at its next wake.
func (c *serverConn) hibernateParked(t *torchConn) {
	if len(t.out) > 0 || !t.settled() {
		return
	}
	c.s.mu.Lock()
	if c.parked.Load() && c.torch == t { // parked between queries: nothing else of t is in use
		c.torch = nil
	}
	c.s.mu.Unlock()
}

// serveTorchConn is the step (serverConn.step) of a torch connection past its
// handshake.
func serveTorchConn(c *serverConn, resumed bool) bool { return c.torch.serve(resumed) }

// chargeBuf takes n bytes of the buffers of the query being read (n < 0: gives them
// back) from the connection's share and the server's bytes in flight.
func (t *torchConn) chargeBuf(n int64) error {
	if n <= 0 {
		t.c.acct.release(-n)
		t.c.s.inflight.release(-n)
		return nil
	}
	return t.c.reserveBuf(n, int(n))
}

// releaseBufs gives back what the buffers of the last query held; the values it
// stored are charged to the store's keys now.
func (t *torchConn) releaseBufs() {
	if t.rd.held != 0 {
		_ = t.chargeBuf(-t.rd.held)
		t.rd.held = 0
	}
}

// torchConn is the state of one torch client's connection. One goroutine reads and
// answers its queries in order, queueing the answers in out, which is written before
// the connection's reader waits for more bytes; the answer to a wait whose keys came
// later is queued and written by a short-lived goroutine, and t.wmu with the fired
// count keeps every STOP_WAITING before the WAIT_CANCELED that follows it, as torch's
// clients expect.
type torchConn struct {
	c    *serverConn
	core torchStore
	gen  TorchProtocol
	rd   tsReader
	w    tsWriter

	wmu sync.Mutex // held while queueing or writing
	out []byte     // answers not written yet, guarded by wmu

	// Of the serving goroutine: a query has begun (its first byte was read), and the
	// read deadline is set (the handshake's, or a query's that had to wait for bytes).
	inQuery, armed bool

	mu     sync.Mutex
	nextID uint64
	waits  map[uint64]func() bool // cancels of the waits not yet answered
	fired  []firedAnswer          // the waits whose keys came, not yet answered
	late   sync.WaitGroup         // goroutines answering fired waits
}

// tsRequest is one parsed query.
type tsRequest struct {
	q      tsQuery
	keys   []string
	list   keyList // the keys of a CHECK or WAIT
	values [][]byte
	num    int64
	nonce  uint32
	rank   uint64 // BARRIER
	world  uint64
	latch  latch // ARRIVE
}

// serve answers queries until the connection ends or is parked (resumed: on a
// goroutine that wake started).
func (t *torchConn) serve(resumed bool) (parked bool) {
	var stage string
	var err error
	defer func() { // also when a query panics
		if parked {
			return
		}
		t.cancelAll()
		_ = t.flush() // the answers to the queries before the one that ended it
		_ = t.c.nc.Close()
		t.c.mayBlock()
		t.late.Wait()
		t.releaseBufs()
		if stage != "" {
			t.c.logTorchEnd("torch "+stage, err)
		}
	}()
	stage, err = t.queries(!resumed)
	return stage == ""
}

// queries reads and answers queries; it returns no stage once the connection is
// parked.
func (t *torchConn) queries(first bool) (stage string, err error) {
	turns := t.c.s.turns
	idle := func() { // a client held back first gets the answers it has queued
		if err := t.flush(); err != nil {
			_ = t.c.nc.Close() // the next read ends the loop
		}
	}
	for ; ; first = false {
		turns.pace(t.c, idle)
		parked, err := t.c.await()
		if parked {
			return "", nil
		}
		if err != nil {
			return "read", err
		}
		r, err := t.read()
		if err != nil {
			return "read", err
		}
		start := turns.now()
		// A query has arrived whole; until the next begins, torch clients may stay
		// silent for as long as the job runs (they send no keepalive).
		t.inQuery = false
		if t.armed {
			_ = t.c.nc.SetReadDeadline(time.Time{})
			t.armed = false
		}
		if first {
			// Out of the handshake slots: the client spoke torch's protocol.
			if _, err := t.c.claimSlot(); err != nil {
				return "slot", err
			}
		}
		err = t.handle(r)
		// torch's client follows a WAIT with the GET or MULTI_GET of its keys: the
		// wake for it belongs to the same get (resume).
		t.c.getNext = r.q == tsWait
		turns.charge(t.c, start)
		if r.list.len() > spareKeys { // the list of many keys goes back for the next query
			bufs.putList(r.list)
		}
		t.releaseBufs()
		t.c.lastQuery.Store(turns.now())
		if err != nil {
			return r.q.String(), err
		}
	}
}

// read parses one query.
func (t *torchConn) read() (tsRequest, error) {
	rd := &t.rd
	b, err := rd.u8()
	if err != nil {
		return tsRequest{}, err
	}
	// A query that has begun must arrive whole within the handshake timeout, so that a
	// peer cannot hold its slot and buffers by dripping bytes: beforeRead sets that
	// deadline when the rest is not in the buffer already.
	t.inQuery = true
	r := tsRequest{q: tsFromWire(t.gen, b)}
	keys := func(n int) error {
		r.keys = make([]string, n)
		for i := range r.keys {
			if r.keys[i], err = rd.key(); err != nil {
				return err
			}
		}
		return nil
	}
	switch r.q {
	case tsValidate:
		m, err := rd.u32()
		if err != nil {
			return r, err
		}
		if m != tsMagic {
			return r, fmt.Errorf("%w: validation number %#x, want %#x", ErrProtocol, m, tsMagic)
		}
	case tsPing:
		if t.gen != TorchProtocol2 {
			return r, fmt.Errorf("%w: query %d unknown to protocol 1", ErrProtocol, b)
		}
		r.nonce, err = rd.u32()
	case tsSet, tsAppend, tsCompareSet, tsQueuePush:
		var k string
		if k, err = rd.key(); err != nil {
			return r, err
		}
		r.keys = []string{k}
		n := 1
		if r.q == tsCompareSet {
			n = 2
		}
		for range n {
			v, err := t.value(r.q, k)
			if err != nil {
				return r, err
			}
			r.values = append(r.values, v)
		}
	case tsGet:
		r.list, err = rd.keyList(1)
	case tsDelete, tsQueuePop, tsQueueLen:
		err = keys(1)
	case tsTorchBarrier:
		if err = keys(1); err == nil {
			var v uint64
			v, err = rd.u64()
			r.num = int64(v)
		}
	case tsAdd:
		if err = keys(1); err == nil {
			var v uint64
			v, err = rd.u64()
			r.num = int64(v)
		}
	case tsCheck, tsWait, tsMultiGet:
		var n int
		if n, err = rd.count("keys", MaxKeysPerRequest); err == nil {
			switch {
			case n == 0 && r.q != tsMultiGet:
				return r, fmt.Errorf("%w: %s of no keys", ErrProtocol, r.q)
			default:
				r.list, err = rd.keyList(n)
			}
		}
	case tsMultiSet:
		var n int
		if n, err = rd.count("keys", MaxKeysPerRequest); err != nil {
			return r, err
		}
		total := 0
		for range n {
			k, err := rd.key()
			if err != nil {
				return r, err
			}
			v, err := t.value(r.q, k)
			if err != nil {
				return r, err
			}
			// One request holds at most a value and 64 KiB more, as ncclgo's frames do.
			if total += len(k) + len(v); total > t.core.maxValue+MaxFrameLen-MaxValueLen {
				return r, &tsValueLimitError{what: fmt.Sprintf("MULTI_SET of %d keys, keys and values together", n), n: uint64(total), limit: t.core.maxValue + MaxFrameLen - MaxValueLen}
			}
			r.keys, r.values = append(r.keys, k), append(r.values, v)
		}
	case tsBarrier:
		if err = keys(1); err == nil {
			if r.rank, err = rd.u64(); err == nil {
				r.world, err = rd.u64()
			}
		}
	case tsBarrierState:
		err = keys(1)
	case tsArrive:
		r.latch, err = t.readArrival()
	case tsNumKeys, tsCancelWait, tsListKeys:
	default:
		return r, &tsUnknownQueryError{gen: t.gen, b: b}
	}
	return r, err
}

// readArrival reads the arguments of an ARRIVE (tcpstore.go), with the limits of
// ncclgo's arrive request: at most MaxKeysPerRequest+1 fields, and keys and values
// together within a value and 64 KiB more, as for MULTI_SET.
func (t *torchConn) readArrival() (latch, error) {
	rd := &t.rd
	var l latch
	fields, total := arriveFixedFields, 0
	limit := t.core.maxValue + MaxFrameLen - MaxValueLen
	key := func() ([]byte, error) {
		k, err := rd.key()
		if total += len(k); err == nil && total > limit {
			err = &tsValueLimitError{what: "ARRIVE, keys and values together", n: uint64(total), limit: limit}
		}
		return []byte(k), err
	}
	value := func(k []byte) ([]byte, error) {
		v, err := t.value(tsArrive, string(k))
		if total += len(v); err == nil && total > limit {
			err = &tsValueLimitError{what: "ARRIVE, keys and values together", n: uint64(total), limit: limit}
		}
		return v, err
	}
	var err error
	if l.done, err = key(); err != nil {
		return l, err
	}
	if l.doneValue, err = value(l.done); err != nil {
		return l, err
	}
	if l.counter, err = key(); err != nil {
		return l, err
	}
	target, err := rd.u64()
	if err != nil {
		return l, err
	}
	l.target = int64(min(target, math.MaxInt64))
	n, err := rd.count("keys to create", (MaxKeysPerRequest+1-fields)/2)
	if err != nil {
		return l, err
	}
	fields += 2 * n
	l.create = make([][]byte, 0, 2*n)
	for range n {
		k, err := key()
		if err != nil {
			return l, err
		}
		v, err := value(k)
		if err != nil {
			return l, err
		}
		l.create = append(l.create, k, v)
	}
	if n, err = rd.count("keys to read", MaxKeysPerRequest+1-fields); err != nil {
		return l, err
	}
	l.read = make([][]byte, 0, n)
	for range n {
		k, err := key()
		if err != nil {
			return l, err
		}
		l.read = append(l.read, k)
	}
	return l, nil
}

// value reads the value of a query q of key, refusing one over the limit before it
// reads it.
func (t *torchConn) value(q tsQuery, key string) ([]byte, error) {
	if b, err := t.rd.r.Peek(8); err == nil {
		if n := binary.LittleEndian.Uint64(b); n > uint64(t.core.maxValue) {
			return nil, &tsValueLimitError{what: fmt.Sprintf("%s of %q", q, key), n: n, limit: t.core.maxValue}
		}
	}
	return t.rd.vector("value", t.core.maxValue)
}

func (t *torchConn) handle(r tsRequest) error {
	w := &t.w
	w.reset()
	switch r.q {
	case tsValidate:
		return nil
	case tsPing:
		w.u32(r.nonce)
	case tsSet:
		return t.core.tcpSet(r.keys[0], r.values[0])
	case tsQueuePush:
		return t.core.tcpQueuePush(r.keys[0], r.values[0])
	case tsQueuePop:
		v, n := t.core.tcpQueuePop(r.keys[0])
		w.i64(int64(n))
		if n == 0 {
			break // an empty queue: the length alone
		}
		return t.writeVectors(w.bytes(), v)
	case tsQueueLen:
		w.i64(int64(t.core.tcpQueueLen(r.keys[0])))
	case tsListKeys:
		return t.listKeys()
	case tsTorchBarrier:
		return t.torchBarrier(r.keys[0], r.num)
	case tsAppend:
		return t.core.tcpAppend(r.keys[0], r.values[0])
	case tsMultiSet:
		for i, k := range r.keys {
			if err := t.core.tcpSet(k, r.values[i]); err != nil {
				return err
			}
		}
		return nil
	case tsCompareSet:
		v, err := t.core.tcpCompareSet(r.keys[0], r.values[0], r.values[1])
		if err != nil {
			return err
		}
		return t.writeVectors(nil, v)
	case tsGet, tsMultiGet:
		var one [1][]byte
		vals := one[:]
		if r.list.len() != 1 {
			vals = make([][]byte, r.list.len())
		}
		for i := range vals {
			v, ok := t.core.tcpGet(r.list.key(i))
			if !ok {
				// torch's server fails the same way; its clients wait before they get.
				return fmt.Errorf("%w: %s of %q, which does not exist", ErrProtocol, r.q, r.list.key(i))
			}
			vals[i] = v
		}
		return t.writeVectors(nil, vals...)
	case tsAdd:
		v, err := t.core.tcpAdd(r.keys[0], r.num)
		if err != nil {
			return err
		}
		w.i64(v)
	case tsDelete:
		var n int64
		if t.core.tcpDelete(r.keys[0]) {
			n = 1
		}
		w.i64(n)
	case tsNumKeys:
		w.i64(t.core.tcpNumKeys())
	case tsCheck:
		if r.list.len() == 1 && string(r.list.key(0)) == tsBarrierProbe {
			w.u8(tsReady) // ncclgo's server: BARRIER is served
		} else if t.core.tcpCheck(r.list) {
			w.u8(tsReady)
		} else {
			w.u8(tsNotReady)
		}
	case tsWait:
		return t.wait(r.list)
	case tsBarrier:
		return t.barrier(r.keys[0], r.rank, r.world)
	case tsArrive:
		return t.arrive(&r.latch)
	case tsBarrierState:
		world, flags, bitmap := encodeBarrierState(t.core.tcpBarrierState(r.keys[0]))
		w.u8(flags)
		w.u64(world)
		w.vec(bitmap)
	case tsCancelWait:
		t.cancelAll()
		t.wmu.Lock()
		defer t.wmu.Unlock()
		t.queueAnswers(0, []byte{tsWaitCancel})
		return nil
	}
	t.queue(w.bytes())
	return nil
}

// beforeRead runs before the connection's reader waits for bytes from the network: it
// writes the queued answers, and gives a query that has begun the handshake timeout
// to arrive whole.
func (t *torchConn) beforeRead() error {
	if err := t.flush(); err != nil {
		return err
	}
	if t.inQuery && !t.armed {
		_ = t.c.nc.SetReadDeadline(time.Now().Add(t.c.s.cfg.handshakeTimeout))
		t.armed = true
	}
	return nil
}

// queue adds b to the answers to write.
func (t *torchConn) queue(b []byte) {
	if len(b) == 0 {
		return
	}
	t.wmu.Lock()
	t.out = append(t.out, b...)
	t.wmu.Unlock()
}

// flush writes the queued answers.
func (t *torchConn) flush() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	return t.flushLocked()
}

// flushLocked writes the queued answers; t.wmu must be held.
func (t *torchConn) flushLocked() error {
	if len(t.out) == 0 {
		return nil
	}
	t.setWriteDeadline()
	_, err := t.c.write(t.out)
	t.out = t.out[:0]
	if cap(t.out) > smallFrame {
		t.out = nil // an idle connection keeps no large buffer
	}
	return err
}

// writeVectors queues head and vals as one reply of vectors. Small values are copied
// into the queue; large ones are written, after what is queued, from where the store
// holds them (never copied, so a MULTI_GET of many large values costs no buffer).
func (t *torchConn) writeVectors(head []byte, vals ...[]byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.out = append(t.out, head...)
	var bufs net.Buffers
	for _, v := range vals {
		t.out = binary.LittleEndian.AppendUint64(t.out, uint64(len(v)))
		if len(v) <= 512 {
			t.out = append(t.out, v...)
			continue
		}
		bufs = append(bufs, t.out, v)
		t.out = nil
	}
	if bufs == nil {
		return nil
	}
	if len(t.out) > 0 {
		bufs = append(bufs, t.out)
	}
	t.out = nil
	t.setWriteDeadline()
	t.c.mayBlock() // a large value may not fit in the socket at once
	_, err := bufs.WriteTo(t.c.nc)
	return err
}

func (t *torchConn) setWriteDeadline() { t.c.armWrite() }

// wait registers a wait; its answer is written once it fires (at once when its keys
// all exist).
func (t *torchConn) wait(keys keyList) error {
	if t.core.tcpCheck(keys) { // the keys exist: nothing to register
		t.wmu.Lock()
		defer t.wmu.Unlock()
		t.queueAnswers(1, nil)
		return nil
	}
	id, fire, err := t.pend()
	if err != nil {
		return err
	}
	cancel, ready, err := t.core.tcpWait(keys, fire)
	t.settle(id, cancel)
	if err != nil || !ready {
		return err // a wait over its bounds closes the connection: torch has no error reply
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.queueAnswers(1, nil)
	return nil
}

// listKeys answers LIST_KEYS: the number of keys, then each as torch's client sent
// it (with its leading "/"), written as the answer grows.
func (t *torchConn) listKeys() error {
	keys, err := t.core.tcpListKeys(t.rd.reserve)
	if err != nil {
		return err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.out = binary.LittleEndian.AppendUint64(t.out, uint64(len(keys)))
	for _, k := range keys {
		t.out = binary.LittleEndian.AppendUint64(t.out, uint64(len(k)+1))
		t.out = append(append(t.out, '/'), k...)
		if len(t.out) >= listChunk {
			if err := t.flushLocked(); err != nil {
				return err
			}
		}
	}
	return nil
}

// listChunk is how much of a LIST_KEYS answer is written at once.
const listChunk = 64 << 10

// torchBarrier is torch's BARRIER: its answer, like a wait's, is written once the
// counter under key reaches world.
func (t *torchConn) torchBarrier(key string, world int64) error {
	id, fire, err := t.pend()
	if err != nil {
		return err
	}
	cancel, done, err := t.core.tcpTorchBarrier(key, world, fire)
	t.settle(id, cancel)
	if err != nil || !done {
		return err
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.queueAnswers(1, nil)
	return nil
}

// barrier is ncclgo's BARRIER: the arrival's answer, like a wait's, is written once
// every rank arrived; an arrival the store refuses is answered with why.
func (t *torchConn) barrier(key string, rank, world uint64) error {
	if rank > maxBarrierWorld || world > maxBarrierWorld {
		return t.barrierFailed(fmt.Errorf("%w: barrier %q: rank %d or world %d out of range", ErrInvalidArgument, key, rank, world))
	}
	id, fire, err := t.pend()
	if err != nil {
		return err
	}
	cancel, done, err := t.core.tcpArrive(key, int(rank), int(world), fire)
	t.settle(id, cancel)
	switch {
	case err != nil:
		return t.barrierFailed(err)
	case !done:
		return nil
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	t.queueAnswers(1, nil)
	return nil
}

// arrive is ncclgo's ARRIVE, Client.Arrive over torch's protocol: answered at once,
// or, like a wait, once the latch's done key exists; an arrival the store refuses is
// answered with why.
func (t *torchConn) arrive(l *latch) error {
	if err := l.invalid(); err != nil {
		return t.barrierFailed(err)
	}
	all := append([][]byte{l.done}, l.read...)
	st := t.c.s.st
	if err := st.roomToWait(t.c.acct, waitCost(len(all), func(i int) int { return len(all[i]) })); err != nil {
		return t.barrierFailed(err)
	}
	keys := make([]string, len(all))
	for i, k := range all {
		keys[i] = string(k)
	}
	id, fire, err := t.pendAnswer()
	if err != nil {
		return err
	}
	w, ans, ready, err := st.arriveLatch(t.c.acct, l, keys, func(a latchAnswer, release func()) { fire(arriveAnswer(a), release) })
	switch {
	case err != nil:
		t.settle(id, nil)
		return t.barrierFailed(err)
	case ready:
		t.settle(id, nil)
		t.wmu.Lock()
		defer t.wmu.Unlock()
		t.queueAnswers(0, arriveAnswer(ans))
		return nil
	}
	t.settle(id, func() bool { return st.cancel(w) })
	return nil
}

// arriveAnswer is the reply to an ARRIVE that the store answered with a.
func arriveAnswer(a latchAnswer) []byte {
	var w tsWriter
	fs := a.fields()
	w.u8(tsStopWaiting)
	w.u64(uint64(len(fs)))
	for _, f := range fs {
		w.vec(f)
	}
	return w.bytes()
}

func (t *torchConn) barrierFailed(err error) error {
	var w tsWriter
	code, msg := byte(tsBarrierFailed), err.Error()
	for _, s := range []struct {
		sentinel error
		code     byte
	}{{ErrInvalidArgument, tsBarrierInvalid}, {ErrStoreFull, tsBarrierFull}, {ErrNotCounter, tsArriveNotCounter}} {
		if errors.Is(err, s.sentinel) {
			code, msg = s.code, strings.TrimPrefix(msg, s.sentinel.Error()+": ")
			break
		}
	}
	w.u8(code)
	w.str(msg)
	t.queue(w.bytes())
	return nil
}

// pend reserves the answer of a blocked request (a wait or a barrier arrival) and
// returns the fire the store calls, with its lock held, once it is due.
func (t *torchConn) pend() (id uint64, fire func(release func()), err error) {
	id, answer, err := t.pendAnswer()
	if err != nil {
		return 0, nil, err
	}
	return id, func(release func()) { answer(nil, release) }, nil
}

// pendAnswer is pend for a blocked request whose answer is more than STOP_WAITING
// (nil): fire is given it.
func (t *torchConn) pendAnswer() (id uint64, fire func(answer []byte, release func()), err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.waits) >= maxTorchWaits {
		return 0, nil, fmt.Errorf("%w: more than %d waits pending on one connection", ErrProtocol, maxTorchWaits)
	}
	id = t.nextID
	t.nextID++
	if t.waits == nil {
		t.waits = make(map[uint64]func() bool)
	}
	t.waits[id] = nil // reserved until settle
	s := t.c.s
	return id, func(answer []byte, release func()) {
		// With the store's lock held: only note it and hand the answer on.
		t.mu.Lock()
		t.forget(id)
		t.fired = append(t.fired, firedAnswer{release: release, answer: answer})
		t.late.Add(1)
		t.mu.Unlock()
		s.deliveries.Add(1)
		s.answers.push(t)
	}, nil
}

// maxAnswerers is how many goroutines at most write the answers of fired waits
// (answerQueue).
const maxAnswerers = 8

// answerQueue holds the torch connections whose waits fired, for a few goroutines to
// answer: the key that every rank of a bring-up waits for fires thousands of waits at
// once, and a goroutine for each would leave thousands of goroutine descriptors, which
// the Go runtime keeps for good. An answer the socket does not take at once is
// written by a goroutine of its own (answerFired), so that a client that stops
// reading delays no other.
type answerQueue struct {
	mu      sync.Mutex
	q       []*torchConn
	at      int
	workers int
}

// push queues t, and starts a goroutine to answer it if fewer than maxAnswerers run.
func (a *answerQueue) push(t *torchConn) {
	a.mu.Lock()
	a.q = append(a.q, t)
	start := a.workers < maxAnswerers
	if start {
		a.workers++
	}
	a.mu.Unlock()
	if start {
		go a.work()
	}
}

// work answers the queued connections until none is left.
func (a *answerQueue) work() {
	for {
		a.mu.Lock()
		if a.at == len(a.q) {
			a.q, a.at = nil, 0
			a.workers--
			a.mu.Unlock()
			return
		}
		t := a.q[a.at]
		a.q[a.at] = nil
		a.at++
		a.mu.Unlock()
		t.answerFired(true)
	}
}

// forget drops the wait id; a connection with no wait pending keeps no map of them.
// t.mu must be held.
func (t *torchConn) forget(id uint64) {
	delete(t.waits, id)
	if len(t.waits) == 0 {
		t.waits = nil
	}
}

// answerLater answers the fired waits of t on a goroutine of its own, which may wait
// for the socket (answerFired).
func (t *torchConn) answerLater() {
	t.late.Add(1)
	t.c.s.deliveries.Add(1)
	go t.answerFired(false)
}

// firedAnswer is a blocked request whose answer is due: release gives back what it
// held, answer is its reply (nil: STOP_WAITING).
type firedAnswer struct {
	release func()
	answer  []byte
}

// settle records the cancel of a blocked request still pending, or forgets it.
func (t *torchConn) settle(id uint64, cancel func() bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.waits[id]; ok {
		if cancel != nil {
			t.waits[id] = cancel
		} else {
			t.forget(id)
		}
	}
}

// takeFired returns the fired waits not answered yet, and forgets them.
func (t *torchConn) takeFired() []firedAnswer {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.fired
	t.fired = nil
	return f
}

// queueAnswers queues the answer of every fired wait not answered yet (STOP_WAITING,
// or an ARRIVE's reply), STOP_WAITING extra more times, then tail, and gives back what the fired waits held (their answers are
// now in t.out, which the connection's own buffer budget covers); t.wmu must be held.
func (t *torchConn) queueAnswers(extra int, tail []byte) {
	fired := t.takeFired()
	for _, f := range fired {
		if f.answer == nil {
			t.out = append(t.out, tsStopWaiting)
		} else {
			t.out = append(t.out, f.answer...)
		}
	}
	for range extra {
		t.out = append(t.out, tsStopWaiting)
	}
	t.out = append(t.out, tail...)
	for _, f := range fired {
		f.release()
	}
}

// answerFired writes the answer of every fired wait not answered yet (none when a
// CANCEL_WAIT or an earlier answerFired took them). Queued (answerQueue), it writes
// what the socket takes at once, and leaves the rest to a goroutine of its own.
func (t *torchConn) answerFired(queued bool) {
	s := t.c.s
	defer s.deliveries.Done()
	defer t.late.Done()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("rendezvous server: panic while answering a PyTorch TCPStore wait; closing the connection", "remote", t.c.remote, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			t.c.shut()
		}
	}()
	if queued && !t.wmu.TryLock() {
		// The connection is writing (to a client that may be slow to read): a goroutine
		// of its own waits for it, not the queue's.
		t.answerLater()
		return
	} else if !queued {
		t.wmu.Lock()
	}
	defer t.wmu.Unlock()
	t.queueAnswers(0, nil)
	if queued && len(t.out) > 0 {
		rc := t.c.rawConn()
		if rc == nil || t.c.nc != t.c.raw { // under TLS: written by a goroutine
			t.answerLater()
			return
		}
		n, err := writeNow(rc, t.out)
		if err != nil {
			t.c.shut()
			return
		}
		t.out = t.out[:copy(t.out, t.out[n:])]
		if len(t.out) > 0 {
			t.answerLater()
			return
		}
		t.out = nil // an idle connection keeps no buffer
		t.c.hibernateParked(t)
		return
	}
	if err := t.flushLocked(); err != nil {
		t.c.shut() // the serve loop ends on its next read
	}
}

// cancelAll forgets every pending wait; waits that fired meanwhile stay in fired, to
// be answered before WAIT_CANCELED as torch's server does.
func (t *torchConn) cancelAll() {
	t.mu.Lock()
	cancels := make([]func() bool, 0, len(t.waits))
	for id, c := range t.waits {
		if c != nil {
			cancels = append(cancels, c)
			delete(t.waits, id)
		}
	}
	t.mu.Unlock()
	for _, c := range cancels {
		c() // false: it fired, and fired holds it
	}
}
