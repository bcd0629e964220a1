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
	tcpGet(key string) ([]byte, bool)
	tcpAdd(key string, delta int64) (int64, error)
	// tcpCompareSet stores desired when the value is expected (or the key is absent and
	// expected empty) and returns what torch replies: the value now stored, or
	// expected when the key is absent and expected is not empty.
	tcpCompareSet(key string, expected, desired []byte) ([]byte, error)
	tcpAppend(key string, value []byte) error
	tcpDelete(key string) bool
	tcpCheck(keys []string) bool
	tcpNumKeys() int64
	// tcpWait calls fire once every key exists, or reports ready when they all do
	// already. fire must not block: it runs with the store's lock held; it is given
	// release, to call once the answer is written. cancel forgets the wait and reports
	// whether it did so before fire ran.
	tcpWait(keys []string, fire func(release func())) (cancel func() bool, ready bool, err error)
	// tcpArrive is the store's barrier (ncclgo's extension): done for the rank that
	// completes it, else fire runs (like tcpWait's) once the others arrive.
	tcpArrive(key string, rank, world int, fire func(release func())) (cancel func() bool, done bool, err error)
	tcpBarrierState(key string) (world int, arrived []bool, done, found bool)
}

// torchStore is one torch connection's view of the server's store: every write and
// blocked wait is charged to the connection's account.
type torchStore struct {
	st *store
	a  *account
}

var _ torchCore = torchStore{}

func (t torchStore) tcpSet(key string, value []byte) error { return t.st.set(t.a, key, value) }

func (t torchStore) tcpGet(key string) ([]byte, bool) { return t.st.get(key) }

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
	if len(cur)+len(value) > MaxValueLen {
		return fmt.Errorf("%w: appending %d bytes to the %d under %q exceeds the value limit of %d", ErrInvalidArgument, len(value), len(cur), key, MaxValueLen)
	}
	// A new slice: the old value may be on its way to a client.
	nv := make([]byte, 0, len(cur)+len(value))
	return st.putLocked(t.a, key, append(append(nv, cur...), value...))
}

func (t torchStore) tcpDelete(key string) bool { return t.st.delete(key) }

func (t torchStore) tcpCheck(keys []string) bool {
	for _, ok := range t.st.check(keys...) {
		if !ok {
			return false
		}
	}
	return true
}

func (t torchStore) tcpNumKeys() int64 { return int64(t.st.numKeys()) }

func (t torchStore) tcpWait(keys []string, fire func(release func())) (func() bool, bool, error) {
	w, _, ready, err := t.st.wait(t.a, keys, false, func(_ []byte, release func()) { fire(release) })
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
