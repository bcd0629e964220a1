package rendezvous

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
)

// torchCore is what the TCPStore handler needs of the store: the store's own
// operations, with torch's semantics where they differ (COMPARE_SET, GET of a missing
// key). *Server implements it over its map; a different store core only has to provide
// these.
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
	// tcpWait calls fire once every key exists (at once if they all do). fire must not
	// block: it may run with the store's lock held. cancel forgets the wait and
	// reports whether it did so before fire ran.
	tcpWait(keys []string, fire func()) (cancel func() bool)
}

// torchWaiters are the waits of torch clients, by key; guarded by Server.mu. A wait is
// listed once under each of its missing keys (a slice, not a set: 4,096 clients that
// each wait for 4,096 keys cost 8 bytes per pair).
type torchWaiters struct {
	byKey map[string][]*torchWaiter
}

type torchWaiter struct {
	keys    []string
	missing int
	fire    func()
	done    bool
}

var _ torchCore = (*Server)(nil)

func (s *Server) tcpSet(key string, value []byte) error {
	s.mu.Lock()
	if !s.storeLocked(key, value) {
		s.mu.Unlock()
		return fmt.Errorf("%w: storing %d bytes under %q would exceed the store limit of %d bytes", ErrStoreFull, len(value), key, s.cfg.maxStoreBytes)
	}
	out := s.notifyLocked(key)
	s.mu.Unlock()
	s.deliver(out)
	return nil
}

func (s *Server) tcpGet(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	return v, ok
}

func (s *Server) tcpAdd(key string, delta int64) (int64, error) {
	s.mu.Lock()
	var cur int64
	if v, ok := s.data[key]; ok {
		var err error
		if cur, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			s.mu.Unlock()
			return 0, fmt.Errorf("%w: value of %q is not a decimal int64: %q", ErrNotCounter, key, v[:min(len(v), 32)])
		}
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: adding %d to %d under %q overflows int64", ErrNotCounter, delta, cur, key)
	}
	cur += delta
	if !s.storeLocked(key, strconv.AppendInt(nil, cur, 10)) {
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: storing counter %q would exceed the store limit of %d bytes", ErrStoreFull, key, s.cfg.maxStoreBytes)
	}
	out := s.notifyLocked(key)
	s.mu.Unlock()
	s.deliver(out)
	return cur, nil
}

func (s *Server) tcpCompareSet(key string, expected, desired []byte) ([]byte, error) {
	s.mu.Lock()
	cur, present := s.data[key]
	switch {
	case !present && len(expected) != 0:
		s.mu.Unlock()
		return expected, nil
	case present && !bytes.Equal(cur, expected):
		s.mu.Unlock()
		return cur, nil
	}
	if !s.storeLocked(key, desired) {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: storing %d bytes under %q would exceed the store limit of %d bytes", ErrStoreFull, len(desired), key, s.cfg.maxStoreBytes)
	}
	out := s.notifyLocked(key)
	s.mu.Unlock()
	s.deliver(out)
	return desired, nil
}

func (s *Server) tcpAppend(key string, value []byte) error {
	s.mu.Lock()
	cur := s.data[key]
	nv := make([]byte, 0, len(cur)+len(value))
	nv = append(append(nv, cur...), value...)
	if !s.storeLocked(key, nv) {
		s.mu.Unlock()
		return fmt.Errorf("%w: appending %d bytes under %q would exceed the store limit of %d bytes", ErrStoreFull, len(value), key, s.cfg.maxStoreBytes)
	}
	out := s.notifyLocked(key)
	s.mu.Unlock()
	s.deliver(out)
	return nil
}

func (s *Server) tcpDelete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[key]
	if ok {
		delete(s.data, key)
		s.size -= int64(len(key) + len(v))
	}
	return ok
}

func (s *Server) tcpCheck(keys []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if _, ok := s.data[k]; !ok {
			return false
		}
	}
	return true
}

func (s *Server) tcpNumKeys() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(len(s.data))
}

func (s *Server) tcpWait(keys []string, fire func()) func() bool {
	w := &torchWaiter{keys: keys, fire: fire}
	s.mu.Lock()
	s.torch.registerLocked(w, s.data)
	if w.missing == 0 {
		w.done = true
		s.mu.Unlock()
		fire()
		return func() bool { return false }
	}
	s.mu.Unlock()
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.done {
			return false
		}
		w.done = true
		s.torch.dropLocked(w)
		return true
	}
}

// registerLocked registers w on each of its keys missing from data.
func (t *torchWaiters) registerLocked(w *torchWaiter, data map[string][]byte) {
	if t.byKey == nil {
		t.byKey = make(map[string][]*torchWaiter)
	}
	w.missing = 0
	for _, k := range w.keys {
		if _, ok := data[k]; ok {
			continue
		}
		t.byKey[k] = append(t.byKey[k], w)
		w.missing++
	}
}

func (t *torchWaiters) dropLocked(w *torchWaiter) {
	for _, k := range w.keys {
		list := t.byKey[k]
		kept := list[:0]
		for _, o := range list {
			if o != w {
				kept = append(kept, o)
			}
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(t.byKey, k)
		} else {
			t.byKey[k] = kept
		}
	}
}

// notifyLocked fires the torch waits that key, just set, completes. The server calls
// it wherever it wakes its own watchers.
func (t *torchWaiters) notifyLocked(key string, data map[string][]byte) {
	list := t.byKey[key]
	if len(list) == 0 {
		return
	}
	delete(t.byKey, key)
	for _, w := range list {
		if w.done {
			continue
		}
		if w.missing--; w.missing > 0 {
			continue
		}
		// A key seen earlier may have been deleted since: look again.
		if t.registerLocked(w, data); w.missing > 0 {
			continue
		}
		w.done = true
		w.fire()
	}
}
