package rendezvous

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The store's side of the queries torch 2.14 added to the TCPStore protocol:
// QUEUE_PUSH, QUEUE_POP and QUEUE_LEN (served by torch's libuv server), LIST_KEYS and
// BARRIER (both of its servers), with the semantics of torch's libuv server
// (TCPStoreLibUvBackend.cpp) read from its source:
//
//   - a queue is a list of values under a key of its own key space: GETNUMKEYS and
//     LIST_KEYS do not count it, DELETE_KEY does not remove it;
//   - CHECK and WAIT find a key whose queue is not empty; a QUEUE_PUSH wakes the
//     oldest WAIT (or BARRIER) of a torch client registered for its key, one, and a SET
//     of the key wakes them all, as for any key;
//   - QUEUE_POP answers the queue's length before the pop, then, when it was not
//     empty, its oldest value; an empty queue answers 0 alone (the client raises
//     "queue is empty"). A blocking pop is the client's WAIT for the key (with its
//     timeout, then CANCEL_WAIT) followed by QUEUE_POP;
//   - BARRIER adds 1 to the decimal counter under its key (without waking anyone),
//     answers STOP_WAITING at once when the counter reaches the world size, waking
//     every request registered for the key, and otherwise registers the request for
//     the key: the next write of the key (the last arrival's BARRIER, a SET, an ADD)
//     answers it. The counter stays: a key reused for a second barrier passes at once.

// tsQueue is one queue, oldest value first.
type tsQueue struct {
	items []queued
	head  int // items[:head] were popped
}

type queued struct {
	value []byte
	owner *share
	cost  int64
}

func (q *tsQueue) len() int { return len(q.items) - q.head }

// queuePush appends value to the queue under key, charged to a, and wakes the oldest
// torch request registered for key.
func (st *store) queuePush(a *account, key string, value []byte) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	cost := entryCost(key, value)
	if err := a.reserveFor(func() string { return fmt.Sprintf("queueing %d bytes under %q", len(value), key) }, cost); err != nil {
		return err
	}
	if st.queues == nil {
		st.queues = make(map[string]*tsQueue)
	}
	q := st.queues[key]
	if q == nil {
		q = &tsQueue{}
		st.queues[key] = q
	}
	q.items = append(q.items, queued{value: value, owner: a.share, cost: cost})
	st.wakeOneLocked(key)
	return nil
}

// queuePop takes the oldest value off the queue under key; n is the queue's length
// before the pop (0: nothing was taken).
func (st *store) queuePop(key string) (value []byte, n int) {
	st.mu.Lock()
	defer st.mu.Unlock()
	q := st.queues[key]
	if q == nil {
		return nil, 0
	}
	n = q.len()
	it := q.items[q.head]
	q.items[q.head] = queued{}
	q.head++
	switch {
	case q.len() == 0:
		delete(st.queues, key) // an empty queue and no queue answer the same
	case q.head > len(q.items)/2:
		q.items = slices.Clone(q.items[q.head:])
		q.head = 0
	}
	it.owner.release(it.cost)
	return it.value, n
}

// queueLen is the length of the queue under key.
func (st *store) queueLen(key string) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if q := st.queues[key]; q != nil {
		return q.len()
	}
	return 0
}

// torchHasLocked reports whether key exists for torch's CHECK and WAIT: a value, or a
// queue that is not empty.
func (st *store) torchHasLocked(key []byte) bool {
	if _, ok := st.data[string(key)]; ok {
		return true
	}
	q := st.queues[string(key)]
	return q != nil && q.len() > 0
}

// torchCheck reports whether every key exists for torch's CHECK.
func (st *store) torchCheck(keys keyList) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range keys.len() {
		if !st.torchHasLocked(keys.key(i)) {
			return false
		}
	}
	return true
}

// torchWait is store.wait for a torch WAIT: ready when every key exists (a queue that
// is not empty counts), else a watcher that a SET of each missing key, or a
// QUEUE_PUSH to it, moves on. As torch's server does, it waits for the keys missing
// now, and only those are kept (as strings, in one allocation): in a bring-up where
// every rank waits for every rank's key, a WAIT holds the few keys still to come, not
// the whole list.
func (st *store) torchWait(a *account, keys keyList, fire func(release func())) (w *watcher, ready bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n, size := 0, 0
	for i := range keys.len() {
		if k := keys.key(i); !st.torchHasLocked(k) {
			n, size = n+1, size+len(k)
		}
	}
	if n == 0 {
		return nil, true, nil
	}
	var all strings.Builder
	all.Grow(size)
	missing := make([]string, 0, n)
	for i := range keys.len() {
		if k := keys.key(i); !st.torchHasLocked(k) {
			all.Write(k)
			missing = append(missing, all.String()[all.Len()-len(k):])
		}
	}
	cost := waitCost(n, func(i int) int { return len(missing[i]) })
	if err := st.chargePendingLocked(a, cost); err != nil {
		return nil, false, err
	}
	w = &watcher{owner: a, keys: missing, cost: cost, torch: true, fire: func(_ []byte, release func()) { fire(release) }}
	st.linkLocked(w, 0)
	return w, false, nil
}

// wakeOneLocked is what a QUEUE_PUSH does to the requests registered for key, as
// torch's server does: the torch ones, oldest first, count key as arrived until one
// has all its keys and is answered.
func (st *store) wakeOneLocked(key string) {
	l, ok := st.watchers[key]
	if !ok {
		return
	}
	for w := l.head; w != nil; {
		next := w.next
		if !w.torch {
			w = next // ncclgo's own requests wait for the key to be set
			continue
		}
		st.unwatchLocked(w)
		if at := st.missingFromLocked(w.keys, w.at+1, len(w.keys)); at < len(w.keys) {
			st.linkLocked(w, at)
			w = next
			continue
		}
		fire := w.fire
		w.fire = nil
		st.firePendingLocked(w.owner, w.cost, func(release func()) { fire(nil, release) })
		return
	}
}

// listKeys returns every key, sorted; charge takes the memory of the list first.
func (st *store) listKeys(charge func(n int64) error) ([]string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := charge(allocSize(16 * len(st.data))); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(st.data))
	for k := range st.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// torchBarrier is torch's BARRIER: it adds 1 to the counter under key and reports
// done when the counter reached world; otherwise fire runs (with st.mu held, as for
// wait) at the next write of key.
func (st *store) torchBarrier(a *account, key string, world int64, fire func(release func())) (w *watcher, done bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	count := int64(1)
	if e := st.data[key]; e != nil {
		cur, err := strconv.ParseInt(string(e.value), 10, 64)
		switch {
		case err != nil:
			return nil, false, fmt.Errorf("%w: barrier counter %q is not a decimal int64: %q", ErrNotCounter, key, e.value[:min(len(e.value), 32)])
		case cur == math.MaxInt64:
			return nil, false, fmt.Errorf("%w: barrier counter %q overflows int64", ErrNotCounter, key)
		}
		count = cur + 1
	}
	// torch's server writes the counter without waking anyone: hide the requests
	// registered for key from putLocked's wake-up.
	l, had := st.watchers[key]
	delete(st.watchers, key)
	err = st.putLocked(a, key, strconv.AppendInt(nil, count, 10))
	if had {
		st.watchers[key] = l
	}
	if err != nil {
		return nil, false, err
	}
	if count >= world {
		st.notifyLocked(key)
		return nil, true, nil
	}
	cost := waitCost(1, func(int) int { return len(key) })
	if err := st.chargePendingLocked(a, cost); err != nil {
		return nil, false, err
	}
	// Registered for key, which exists: notifyLocked fires it at the key's next write.
	w = &watcher{owner: a, keys: []string{key}, cost: cost, torch: true, fire: func(_ []byte, release func()) { fire(release) }}
	st.linkLocked(w, 0)
	return w, false, nil
}
