package rendezvous

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"sync"
)

// store is the key space of a Server and everything that waits on it. Every protocol
// a server speaks calls these methods, so all of them share the same keys, the same
// memory budget, the same per-client shares and the same barriers. Each method takes
// the account of the connection making the call (its client's share of the budget,
// see Server.shareLocked) where it may hold memory. Values passed in become the
// store's (callers copy what they reuse); values returned are shared and must not be
// modified.
type store struct {
	mu       sync.Mutex
	budget   *budget
	data     map[string]*entry
	watchers map[string]watchList // blocked requests by the key each waits for now
	barriers map[string]*barrier
	pending  int  // blocked requests (watchers and barrier arrivals) in total
	closed   bool // no more callbacks fire
	world    int  // the job's world size (WithWorld); 0 unknown

	// queues are torch's QUEUE_PUSH queues (tcpstore_queue.go), by key.
	queues map[string]*tsQueue
}

type entry struct {
	value []byte
	owner *share // the client that wrote it last
	cost  int64
}

// watcher is a blocked get or wait. It waits for one missing key at a time,
// keys[at], linked into that key's watchList; when that key is set it moves on to the
// next missing one, so that a wait for N keys costs O(N) however the keys arrive, and
// a key holds one list entry per watcher waiting for it now, not per watcher naming it.
type watcher struct {
	owner      *account
	keys       []string // as named (duplicates cost nothing more)
	at         int      // index in keys of the key waited for now
	prev, next *watcher // neighbours in the watchList of keys[at]
	cost       int64
	value      bool // a get: fire receives the value of keys[0]
	fire       func(value []byte, release func())

	// torch: a torch WAIT or BARRIER, which a QUEUE_PUSH to its key wakes.
	torch bool
}

// watchList is the watchers waiting for one key, oldest first.
type watchList struct{ head, tail *watcher }

// barrier counts the ranks that arrived under one key.
type barrier struct {
	world   int
	arrived []uint64 // bitmap of ranks; nil once done
	n       int
	done    bool
	live    map[int]*arrival // arrivals still waiting, by rank
	owner   *share
	cost    int64
}

// arrival is one rank waiting at a barrier.
type arrival struct {
	b    *barrier
	rank int
	a    *account
	fire func(release func())
}

func newStore(b *budget) *store {
	return &store{
		budget:   b,
		data:     make(map[string]*entry),
		watchers: make(map[string]watchList),
		barriers: make(map[string]*barrier),
	}
}

func entryCost(key string, value []byte) int64 {
	return keyOverhead + allocSize(len(key)) + allocSize(len(value))
}

// putLocked stores value under key, charged to a, unless the budget or a's share
// would be exceeded; it returns the watchers to fire.
func (st *store) putLocked(a *account, key string, value []byte) error {
	cost := entryCost(key, value)
	old := st.data[key]
	// What a refusal names is written only when it happens (not on every Set).
	what := func() string { return fmt.Sprintf("storing %d bytes under %q", len(value), key) }
	if old != nil && old.owner == a.share {
		if err := a.reserveFor(what, cost-old.cost); err != nil {
			return err
		}
		old.value, old.cost = value, cost
	} else {
		if err := a.reserveFor(what, cost); err != nil {
			return err
		}
		if old != nil {
			old.owner.release(old.cost)
		}
		st.data[key] = &entry{value: value, owner: a.share, cost: cost}
	}
	st.notifyLocked(key)
	return nil
}

// set stores value under key and wakes the requests waiting for it.
func (st *store) set(a *account, key string, value []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.putLocked(a, key, value)
}

// get returns the value of key and whether it exists, without waiting.
func (st *store) get(key string) ([]byte, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e := st.data[key]; e != nil {
		return e.value, true
	}
	return nil, false
}

// add adds delta to the decimal counter under key (missing: 0) and returns its new
// value.
func (st *store) add(a *account, key string, delta int64) (int64, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var cur int64
	if e := st.data[key]; e != nil {
		var err error
		if cur, err = strconv.ParseInt(string(e.value), 10, 64); err != nil {
			return 0, fmt.Errorf("%w: value of %q is not a decimal int64: %q", ErrNotCounter, key, e.value[:min(len(e.value), 32)])
		}
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		return 0, fmt.Errorf("%w: adding %d to %d under %q overflows int64", ErrNotCounter, delta, cur, key)
	}
	cur += delta
	if err := st.putLocked(a, key, strconv.AppendInt(nil, cur, 10)); err != nil {
		return 0, err
	}
	return cur, nil
}

// compareAndSet stores new under key if its value equals old (old nil: if the key
// does not exist). It returns the value after the operation (nil if none) and whether
// it stored new.
func (st *store) compareAndSet(a *account, key string, old, new []byte) (current []byte, swapped bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.data[key]
	if old == nil {
		swapped = e == nil
	} else {
		swapped = e != nil && bytes.Equal(e.value, old)
	}
	if !swapped {
		if e == nil {
			return nil, false, nil
		}
		return e.value, false, nil
	}
	if err := st.putLocked(a, key, new); err != nil {
		return nil, false, err
	}
	return new, true, nil
}

// delete removes key and reports whether it existed.
func (st *store) delete(key string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.data[key]
	if e == nil {
		return false
	}
	delete(st.data, key)
	e.owner.release(e.cost)
	return true
}

// checkFields reports which of keys (still in a frame) exist: one byte per key, 1 if
// it does.
func (st *store) checkFields(keys [][]byte) []byte {
	out := make([]byte, len(keys))
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, k := range keys {
		if _, ok := st.data[string(k)]; ok {
			out[i] = 1
		}
	}
	return out
}

// numKeys is the number of keys stored.
func (st *store) numKeys() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.data)
}

// waitCost is what a blocked request naming n keys (of lengths keyLen) costs.
func waitCost(n int, keyLen func(i int) int) int64 {
	cost := int64(watcherOverhead)
	for i := range n {
		cost += allocSize(keyLen(i)) + watchKeyOverhead
	}
	return cost
}

// roomToWait reports, without charging anything, whether a's next blocked request
// of cost would be within the bounds, so that a caller can refuse it before copying
// its keys.
func (st *store) roomToWait(a *account, cost int64) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.pendingBoundsLocked(a, cost); err != nil {
		return err
	}
	if a.used.Load()+cost > a.limit && a.limit < a.b.limit {
		return &errFull{what: "a blocked request", n: cost, share: a.limit, used: a.used.Load()}
	}
	if a.b.used.Load()+cost > a.b.limit {
		return &errFull{what: "a blocked request", n: cost, limit: a.b.limit, used: a.b.used.Load()}
	}
	return nil
}

func (st *store) pendingBoundsLocked(a *account, cost int64) error {
	switch {
	case a.pending >= maxPendingPerConn:
		return fmt.Errorf("%w: this connection already has %d blocked requests, the limit", ErrInvalidArgument, a.pending)
	case a.pendingBytes+cost > maxPendingBytes:
		return fmt.Errorf("%w: blocked requests on this connection would hold %d bytes, over the limit of %d", ErrInvalidArgument, a.pendingBytes+cost, maxPendingBytes)
	case st.pending >= maxPendingTotal:
		return fmt.Errorf("%w: the server already holds %d blocked requests, its limit", ErrStoreFull, st.pending)
	}
	return nil
}

// chargePendingLocked takes a blocked request's cost from a's share, within the
// bounds per client and in total.
func (st *store) chargePendingLocked(a *account, cost int64) error {
	if err := st.pendingBoundsLocked(a, cost); err != nil {
		return err
	}
	if err := a.reserve("a blocked request", cost); err != nil {
		return err
	}
	a.pending++
	a.pendingBytes += cost
	st.pending++
	return nil
}

func (st *store) releasePending(a *account, cost int64) {
	st.mu.Lock()
	a.pending--
	a.pendingBytes -= cost
	st.pending--
	st.mu.Unlock()
	a.release(cost)
}

// wait returns at once (ready, with the value of keys[0] when wantValue) if every key
// exists; otherwise it registers a watcher whose fire runs, with st.mu held, once they
// all do. fire must not block or call the store; it calls release once the reply is
// written. cancel forgets a watcher that has not fired.
func (st *store) wait(a *account, keys []string, wantValue bool, fire func(value []byte, release func())) (w *watcher, value []byte, ready bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	at := st.missingFromLocked(keys, 0, len(keys))
	if at == len(keys) {
		if wantValue {
			value = st.data[keys[0]].value
		}
		return nil, value, true, nil
	}
	// Charged for every key named, duplicates too: the request holds a copy of each.
	cost := waitCost(len(keys), func(i int) int { return len(keys[i]) })
	if err := st.chargePendingLocked(a, cost); err != nil {
		return nil, nil, false, err
	}
	w = &watcher{owner: a, keys: keys, cost: cost, value: wantValue, fire: fire}
	st.linkLocked(w, at)
	return w, nil, false, nil
}

// missingFromLocked returns the index of the first of keys[from:to] that does not
// exist, or len(keys) when they all do.
func (st *store) missingFromLocked(keys []string, from, to int) int {
	for i := from; i < to; i++ {
		if _, ok := st.data[keys[i]]; !ok {
			return i
		}
	}
	return len(keys)
}

// linkLocked makes w wait for keys[at], at the end of that key's list.
func (st *store) linkLocked(w *watcher, at int) {
	w.at = at
	l := st.watchers[w.keys[at]]
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	st.watchers[w.keys[at]] = l
}

// cancel forgets a watcher that has not fired and reports whether it was pending.
func (st *store) cancel(w *watcher) bool {
	st.mu.Lock()
	if w.fire == nil {
		st.mu.Unlock()
		return false
	}
	st.unwatchLocked(w)
	w.fire = nil
	st.mu.Unlock()
	st.releasePending(w.owner, w.cost)
	return true
}

// unwatchLocked takes w out of the list of the key it waits for.
func (st *store) unwatchLocked(w *watcher) {
	key := w.keys[w.at]
	l := st.watchers[key]
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	if l.head == nil {
		delete(st.watchers, key)
	} else {
		st.watchers[key] = l
	}
}

// notifyLocked moves each watcher of a key that was just set on to its next missing
// key, and fires those whose keys now all exist.
func (st *store) notifyLocked(key string) {
	l, ok := st.watchers[key]
	if !ok {
		return
	}
	delete(st.watchers, key)
	for w := l.head; w != nil; {
		next := w.next
		w.prev, w.next = nil, nil
		at := st.missingFromLocked(w.keys, w.at+1, len(w.keys))
		if at == len(w.keys) && !w.torch { // torch's servers count keys, not look again
			// A key seen earlier may have been deleted since: look again.
			at = st.missingFromLocked(w.keys, 0, w.at)
		}
		if at < len(w.keys) {
			st.linkLocked(w, at)
		} else {
			fire := w.fire
			w.fire = nil
			var v []byte
			if w.value {
				v = st.data[w.keys[0]].value
			}
			st.firePendingLocked(w.owner, w.cost, func(release func()) { fire(v, release) })
		}
		w = next
	}
}

// firePendingLocked hands a blocked request its reply, or drops it when the store is
// closed.
func (st *store) firePendingLocked(a *account, cost int64, fire func(release func())) {
	var once sync.Once
	release := func() {
		once.Do(func() {
			a.pending--
			a.pendingBytes -= cost
			st.pending--
			a.release(cost)
		})
	}
	if st.closed {
		release() // called with st.mu held, as fire's release may be
		return
	}
	fire(func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		release()
	})
}

// close stops callbacks from firing.
func (st *store) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
}

// arrive records that rank of world arrived at the barrier key. The barrier completes
// when every rank in [0, world) has arrived exactly once: done is true for the rank
// that completes it; the others' fire runs (with st.mu held, as for wait) at that
// moment. A rank that arrives again while its earlier arrival still waits, a rank
// outside [0, world), a world that differs from the barrier's or an arrival at a
// completed barrier is an error naming it, and so is a world other than the job's
// where the server knows it (WithWorld). A cancelled arrival still counts; the same
// rank may then arrive again (after a lost connection) without being counted twice.
func (st *store) arrive(a *account, key string, rank, world int, fire func(release func())) (w *arrival, done bool, err error) {
	switch {
	case world < 1 || world > maxBarrierWorld:
		return nil, false, fmt.Errorf("%w: barrier %q: world size %d outside [1, %d]", ErrInvalidArgument, key, world, maxBarrierWorld)
	case rank < 0 || rank >= world:
		return nil, false, fmt.Errorf("%w: barrier %q: rank %d outside [0, %d)", ErrInvalidArgument, key, rank, world)
	case st.world > 0 && world != st.world:
		return nil, false, fmt.Errorf("%w: barrier %q: rank %d arrived for a world of %d, this store serves a job of %d ranks", ErrInvalidArgument, key, rank, world, st.world)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.barriers[key]
	switch {
	case b == nil:
		cost := barrierOverhead + allocSize(len(key)) + allocSize((world+63)/64*8)
		if err := a.reserve(fmt.Sprintf("barrier %q of %d ranks", key, world), cost); err != nil {
			return nil, false, err
		}
		b = &barrier{world: world, arrived: make([]uint64, (world+63)/64), live: map[int]*arrival{}, owner: a.share, cost: cost}
		st.barriers[key] = b
	case b.world != world:
		return nil, false, fmt.Errorf("%w: barrier %q: rank %d arrived for a world of %d, the barrier is for %d", ErrInvalidArgument, key, rank, world, b.world)
	case b.done:
		return nil, false, fmt.Errorf("%w: barrier %q: rank %d arrived again after the barrier completed (key reused?)", ErrInvalidArgument, key, rank)
	case b.live[rank] != nil:
		return nil, false, fmt.Errorf("%w: barrier %q: rank %d already arrived and is waiting (duplicate rank)", ErrInvalidArgument, key, rank)
	}
	word, bit := rank/64, uint64(1)<<(rank%64)
	counted := b.arrived[word]&bit != 0
	if !counted && b.n+1 == b.world {
		b.done = true
		b.arrived = nil
		b.n = b.world
		for _, w := range b.live {
			st.firePendingLocked(w.a, watcherOverhead, w.fire)
			w.fire = nil
		}
		b.live = nil
		shrunk := barrierOverhead + allocSize(len(key))
		b.owner.release(b.cost - shrunk)
		b.cost = shrunk
		return nil, true, nil
	}
	if err := st.chargePendingLocked(a, watcherOverhead); err != nil {
		return nil, false, err
	}
	if !counted {
		b.arrived[word] |= bit
		b.n++
	}
	w = &arrival{b: b, rank: rank, a: a, fire: fire}
	b.live[rank] = w
	return w, false, nil
}

// cancelArrival stops waiting at a barrier (the rank still counts as arrived) and
// reports whether it was still waiting.
func (st *store) cancelArrival(w *arrival) bool {
	st.mu.Lock()
	if w.fire == nil {
		st.mu.Unlock()
		return false
	}
	w.fire = nil
	if w.b.live[w.rank] == w {
		delete(w.b.live, w.rank)
	}
	st.mu.Unlock()
	st.releasePending(w.a, watcherOverhead)
	return true
}

// barrierState reports a barrier's world and which ranks arrived (nil when done:
// all of them); found is false when no rank arrived yet.
func (st *store) barrierState(key string) (world int, arrived []bool, done, found bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	b := st.barriers[key]
	if b == nil {
		return 0, nil, false, false
	}
	if b.done {
		return b.world, nil, true, true
	}
	arrived = make([]bool, b.world)
	for i, w := range b.arrived {
		for w != 0 {
			j := bits.TrailingZeros64(w)
			arrived[i*64+j] = true
			w &^= 1 << j
		}
	}
	return b.world, arrived, false, true
}

// numPending is the number of blocked requests (watchers and barrier arrivals).
func (st *store) numPending() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pending
}
