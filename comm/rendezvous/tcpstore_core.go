package rendezvous

import (
	"bytes"
	"fmt"
)

// torchCore is what the TCPStore handler needs of the store: the store's own
// operations, with torch's semantics where they differ (COMPARE_SET, APPEND), charged
// to the client making them. torchStore implements it over the server's store, so
// that both protocols share keys, the memory budget and the per-client shares.
type torchCore interface {
	tcpSet(key string, value []byte) error
	tcpGet(key []byte) ([]byte, bool)
	tcpAdd(key string, delta int64) (int64, error)
	// tcpCompareSet stores desired when the value is expected (or the key is absent and
	// expected empty) and returns what torch replies: the value now stored, or
	// expected when the key is absent and expected is not empty.
	tcpCompareSet(key string, expected, desired []byte) ([]byte, error)
	tcpAppend(key string, value []byte) error
	tcpDelete(key string) bool
	tcpCheck(keys keyList) bool
	tcpNumKeys() int64
	// tcpWait calls fire once every key exists, or reports ready when they all do
	// already. fire must not block: it runs with the store's lock held; it is given
	// release, to call once the answer is written. cancel forgets the wait and reports
	// whether it did so before fire ran.
	tcpWait(keys keyList, fire func(release func())) (cancel func() bool, ready bool, err error)
	// tcpArrive is the store's barrier (ncclgo's extension): done for the rank that
	// completes it, else fire runs (like tcpWait's) once the others arrive.
	tcpArrive(key string, rank, world int, fire func(release func())) (cancel func() bool, done bool, err error)
	tcpBarrierState(key string) (world int, arrived []bool, done, found bool)
	// torch 2.14's queries (tcpstore_queue.go).
	tcpQueuePush(key string, value []byte) error
	tcpQueuePop(key string) (value []byte, n int)
	tcpQueueLen(key string) int
	tcpListKeys(charge func(n int64) error) ([]string, error)
	tcpTorchBarrier(key string, world int64, fire func(release func())) (cancel func() bool, done bool, err error)
}

// keyList is the keys of one query, read into one buffer: key i is
// buf[ends[i-1]:ends[i]]. Looking them up costs no allocation.
type keyList struct {
	buf  []byte
	ends []int
}

func (l keyList) len() int { return len(l.ends) }

func (l keyList) key(i int) []byte {
	start := 0
	if i > 0 {
		start = l.ends[i-1]
	}
	return l.buf[start:l.ends[i]]
}

// torchStore is one torch connection's view of the server's store: every write and
// blocked wait is charged to the connection's account.
type torchStore struct {
	st *store
	a  *account
	// maxValue is the longest value (WithMaxTorchValueBytes).
	maxValue int
}

var _ torchCore = torchStore{}

func (t torchStore) tcpSet(key string, value []byte) error { return t.st.set(t.a, key, value) }

func (t torchStore) tcpGet(key []byte) ([]byte, bool) {
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if e := st.data[string(key)]; e != nil { // looked up without a copy of key
		return e.value, true
	}
	return nil, false
}

func (t torchStore) tcpAdd(key string, delta int64) (int64, error) {
	return t.st.add(t.a, key, delta)
}

func (t torchStore) tcpCompareSet(key string, expected, desired []byte) ([]byte, error) {
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.data[key]
	switch {
	case e == nil && len(expected) != 0:
		return expected, nil
	case e != nil && !bytes.Equal(e.value, expected):
		return e.value, nil
	}
	if err := st.putLocked(t.a, key, desired); err != nil {
		return nil, err
	}
	return desired, nil
}

func (t torchStore) tcpAppend(key string, value []byte) error {
	st := t.st
	st.mu.Lock()
	defer st.mu.Unlock()
	var cur []byte
	if e := st.data[key]; e != nil {
		cur = e.value
	}
	if len(cur)+len(value) > t.maxValue {
		return &tsValueLimitError{what: fmt.Sprintf("appending %d bytes to the %d under %q", len(value), len(cur), key), n: uint64(len(cur) + len(value)), limit: t.maxValue}
	}
	// A new slice: the old value may be on its way to a client.
	nv := make([]byte, 0, len(cur)+len(value))
	return st.putLocked(t.a, key, append(append(nv, cur...), value...))
}

func (t torchStore) tcpDelete(key string) bool { return t.st.delete(key) }

func (t torchStore) tcpCheck(keys keyList) bool { return t.st.torchCheck(keys) }

func (t torchStore) tcpNumKeys() int64 { return int64(t.st.numKeys()) }

func (t torchStore) tcpWait(keys keyList, fire func(release func())) (func() bool, bool, error) {
	w, ready, err := t.st.torchWait(t.a, keys, fire)
	if err != nil || ready {
		return nil, ready, err
	}
	return func() bool { return t.st.cancel(w) }, false, nil
}

func (t torchStore) tcpArrive(key string, rank, world int, fire func(release func())) (func() bool, bool, error) {
	w, done, err := t.st.arrive(t.a, key, rank, world, fire)
	if err != nil || done {
		return nil, done, err
	}
	return func() bool { return t.st.cancelArrival(w) }, false, nil
}

func (t torchStore) tcpBarrierState(key string) (int, []bool, bool, bool) {
	return t.st.barrierState(key)
}

func (t torchStore) tcpQueuePush(key string, value []byte) error {
	return t.st.queuePush(t.a, key, value)
}

func (t torchStore) tcpQueuePop(key string) ([]byte, int) { return t.st.queuePop(key) }

func (t torchStore) tcpQueueLen(key string) int { return t.st.queueLen(key) }

func (t torchStore) tcpListKeys(charge func(n int64) error) ([]string, error) {
	return t.st.listKeys(charge)
}

func (t torchStore) tcpTorchBarrier(key string, world int64, fire func(release func())) (func() bool, bool, error) {
	w, done, err := t.st.torchBarrier(t.a, key, world, fire)
	if err != nil || done {
		return nil, done, err
	}
	return func() bool { return t.st.cancel(w) }, false, nil
}
