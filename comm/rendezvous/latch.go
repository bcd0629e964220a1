package rendezvous

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// KeyValue is a key and its value.
type KeyValue struct {
	Key   string
	Value []byte
}

// Arrival is one party's arrival at a countdown latch kept in the store's keys
// (Client.Arrive): a counter that counts the arrivals, a target, and a done key that
// the arrival reaching the target creates, which every arrival waits for.
type Arrival struct {
	// Done is the latch's done key. While it exists the latch is closed: an arrival
	// changes nothing and is answered at once (Arrived.Closed). Any client may close
	// the latch early by creating it (Set, CompareAndSet), which ends every wait.
	Done string
	// DoneValue is what the arrival that brings the counter to Target stores under
	// Done.
	DoneValue []byte
	// Counter counts the arrivals, as decimal text like Add's counters.
	Counter string
	// Target is the number of arrivals that completes the latch, at least 1.
	Target int64
	// Create are keys the arrival creates: if any of them exists already, the arrival
	// changes nothing and is answered at once (Arrived.Conflict), so that a party that
	// arrives twice (a restarted process, under a marker of its own) is told so.
	Create []KeyValue
	// Read are keys whose values the answer carries, read once Done exists.
	Read []string
}

// Arrived is the store's answer to an Arrival.
type Arrived struct {
	// Count is the counter after this arrival; 0 when the arrival was not counted
	// (Closed or Conflict).
	Count int64
	// Closed says that Done existed before the arrival: nothing was changed.
	Closed bool
	// Conflict is the index in Create of a key that existed already (nothing was
	// changed), -1 when none did.
	Conflict int
	// Done is Done's value, nil when the answer came without waiting for it (Conflict,
	// or a Count past Target with Done absent).
	Done []byte
	// Values are the values of Read, in order, once Done exists (nil for a key that
	// does not exist, an empty non-nil slice for an empty value); nil when Done is.
	Values [][]byte
}

// Flags of an arrive reply.
const (
	arrivedClosed   = 1 // Done existed before: nothing changed
	arrivedConflict = 2 // a Create key existed: nothing changed
	arrivedDone     = 4 // Done exists: its value and the Read values follow
)

// arriveFixedFields are the fields of an arrive request before its Create pairs:
// done key, done value, counter key, target, number of Create pairs.
const arriveFixedFields = 5

// Arrive arrives at a countdown latch, atomically with respect to every other request
// on the store:
//
//  1. if Done exists, nothing changes and the answer comes at once (Closed, with Done's
//     value and the Read values);
//  2. else if a key of Create exists, nothing changes and the answer comes at once
//     (Conflict names it);
//  3. else the Create keys are stored, the counter grows by one, and the arrival that
//     brings it to Target stores DoneValue under Done;
//  4. the answer then comes once Done exists (at once for the arrival that completed
//     the latch, or one whose Count is past Target), with the new Count, Done's value
//     and the values of Read at that moment.
//
// So n parties of a bring-up each make one request and get one answer: arrive, be
// counted, wait for all, read what one of them published (in its Create). When ctx
// ends first the wait is cancelled on the server too and ctx's error returned; the
// arrival stays counted. A Counter that holds anything but a decimal int64 fails with
// ErrNotCounter, a budget that cannot hold the new keys with ErrStoreFull, both
// changing nothing. Arrive is part of ncclgo's own protocol; PyTorch's TCPStore
// protocol has no such request.
func (c *Client) Arrive(ctx context.Context, a Arrival) (Arrived, error) {
	if err := a.validate(); err != nil {
		return Arrived{}, fmt.Errorf("arrive at %q: %w", a.Done, err)
	}
	r, err := c.call(ctx, opArrive, true, func(e *encoder) {
		e.string(a.Done)
		e.bytes(a.DoneValue)
		e.string(a.Counter)
		e.uint64(uint64(a.Target))
		e.uint64(uint64(len(a.Create)))
		for _, kv := range a.Create {
			e.string(kv.Key)
			e.bytes(kv.Value)
		}
		for _, k := range a.Read {
			e.string(k)
		}
	})
	if err != nil {
		return Arrived{}, fmt.Errorf("arrive at %q on %s: %w", a.Done, c.addr, err)
	}
	out, err := decodeArrived(r.fields, len(a.Create), len(a.Read))
	if err != nil {
		return Arrived{}, fmt.Errorf("arrive at %q: %w", a.Done, err)
	}
	return out, nil
}

// validate checks an Arrival against the protocol's limits.
func (a Arrival) validate() error {
	if a.Target < 1 {
		return fmt.Errorf("%w: target %d, want at least 1", ErrInvalidArgument, a.Target)
	}
	if n := arriveFixedFields + 2*len(a.Create) + len(a.Read); n > MaxKeysPerRequest+1 {
		return fmt.Errorf("%w: %d keys to create and %d to read make %d fields, over the limit of %d", ErrInvalidArgument, len(a.Create), len(a.Read), n, MaxKeysPerRequest+1)
	}
	for _, k := range []string{a.Done, a.Counter} {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	if a.Done == a.Counter {
		return fmt.Errorf("%w: done key and counter are both %q", ErrInvalidArgument, a.Done)
	}
	if err := checkValue(a.DoneValue); err != nil {
		return err
	}
	keys := make([]string, 0, len(a.Create))
	for _, kv := range a.Create {
		if err := checkKey(kv.Key); err != nil {
			return err
		}
		if kv.Key == a.Done || kv.Key == a.Counter {
			return fmt.Errorf("%w: key to create %q is the latch's done key or counter", ErrInvalidArgument, kv.Key)
		}
		keys = append(keys, kv.Key)
		if err := checkValue(kv.Value); err != nil {
			return err
		}
	}
	if err := twice(keys); err != nil {
		return err
	}
	return checkKeys(a.Read)
}

// decodeArrived parses an arrive reply: flags, count (i64), conflict index (i64),
// then with flag 4 Done's value, one byte per Read key (1 if it exists) and the values.
func decodeArrived(fields [][]byte, creates, reads int) (Arrived, error) {
	bad := fmt.Errorf("%w: malformed arrive reply with %d fields", ErrProtocol, len(fields))
	if len(fields) < 3 || len(fields[0]) != 1 || len(fields[1]) != 8 || len(fields[2]) != 8 {
		return Arrived{}, bad
	}
	flags := fields[0][0]
	out := Arrived{
		Count:    int64(binary.BigEndian.Uint64(fields[1])),
		Closed:   flags&arrivedClosed != 0,
		Conflict: -1,
	}
	if flags&arrivedConflict != 0 {
		i := binary.BigEndian.Uint64(fields[2])
		if i >= uint64(creates) {
			return Arrived{}, fmt.Errorf("%w: arrive reply names key %d of %d to create", ErrProtocol, i, creates)
		}
		out.Conflict = int(i)
	}
	if flags&arrivedDone == 0 {
		if len(fields) != 3 {
			return Arrived{}, bad
		}
		return out, nil
	}
	if len(fields) != 5+reads || len(fields[4]) != reads {
		return Arrived{}, bad
	}
	out.Done = nonNil(fields[3])
	out.Values = make([][]byte, reads)
	for i := range reads {
		if fields[4][i] == 1 {
			out.Values[i] = nonNil(fields[5+i])
		}
	}
	return out, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// latch is a decoded arrive request; its slices alias the frame.
type latch struct {
	done, counter []byte
	doneValue     []byte
	target        int64
	create        [][]byte // key, value, key, value...
	read          [][]byte
}

// parseArrive checks an arrive request's fields.
func parseArrive(f frame) (latch, error) {
	fs := f.fields
	if len(fs) < arriveFixedFields || len(fs[3]) != 8 || len(fs[4]) != 8 {
		return latch{}, badFields(f)
	}
	l := latch{done: fs[0], doneValue: fs[1], counter: fs[2], target: int64(binary.BigEndian.Uint64(fs[3]))}
	nc := binary.BigEndian.Uint64(fs[4])
	if nc > uint64(len(fs)-arriveFixedFields)/2 {
		return latch{}, badFields(f)
	}
	l.create = fs[arriveFixedFields : arriveFixedFields+2*int(nc)]
	l.read = fs[arriveFixedFields+2*int(nc):]
	for _, k := range [][]byte{l.done, l.counter} {
		if err := keyOK(k); err != nil {
			return latch{}, err
		}
	}
	for i := 0; i < len(l.create); i += 2 {
		if err := keyOK(l.create[i]); err != nil {
			return latch{}, err
		}
	}
	for _, k := range l.read {
		if err := keyOK(k); err != nil {
			return latch{}, err
		}
	}
	return l, nil
}

// invalid says what makes a well-formed arrive request one the store refuses.
func (l latch) invalid() error {
	if l.target < 1 {
		return fmt.Errorf("%w: target %d, want at least 1", ErrInvalidArgument, l.target)
	}
	if string(l.done) == string(l.counter) {
		return fmt.Errorf("%w: done key and counter are both %q", ErrInvalidArgument, l.done)
	}
	var keys []string
	for i := 0; i < len(l.create); i += 2 {
		if k := l.create[i]; string(k) == string(l.done) || string(k) == string(l.counter) {
			return fmt.Errorf("%w: key to create %q is the latch's done key or counter", ErrInvalidArgument, k)
		}
		if len(l.create) > 2 {
			keys = append(keys, string(l.create[i]))
		}
	}
	return twice(keys)
}

// twice names a key that keys holds twice; keys may be reordered.
func twice(keys []string) error {
	if len(keys) < 2 {
		return nil
	}
	slices.Sort(keys)
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			return fmt.Errorf("%w: key to create %q named twice", ErrInvalidArgument, keys[i])
		}
	}
	return nil
}

// latchAnswer is what the store answers an arrival; its values are the store's.
type latchAnswer struct {
	flags    byte
	count    int64
	conflict int
	done     []byte
	present  []byte
	values   [][]byte
}

// fields is the reply's fields.
func (a latchAnswer) fields() [][]byte {
	conflict := int64(-1)
	if a.flags&arrivedConflict != 0 {
		conflict = int64(a.conflict)
	}
	fs := make([][]byte, 0, 5+len(a.values))
	fs = append(fs, []byte{a.flags}, binary.BigEndian.AppendUint64(nil, uint64(a.count)), binary.BigEndian.AppendUint64(nil, uint64(conflict)))
	if a.flags&arrivedDone != 0 {
		fs = append(fs, a.done, a.present)
		fs = append(fs, a.values...)
	}
	return fs
}

// doneLocked fills in Done's value and the Read values; st.mu is held and Done exists.
func (st *store) doneLocked(a *latchAnswer, read []string) {
	a.flags |= arrivedDone
	a.done = st.data[read[0]].value
	a.present = make([]byte, len(read)-1)
	a.values = make([][]byte, len(read)-1)
	for i, k := range read[1:] {
		if e := st.data[k]; e != nil {
			a.present[i], a.values[i] = 1, e.value
		}
	}
}

// arriveLatch is Client.Arrive's step on the store. keys is Done followed by the Read keys
// (what a waiting arrival holds). It answers at once (ready) or registers a watcher of
// Done whose fire runs, with st.mu held as for wait, once Done exists.
func (st *store) arriveLatch(a *account, l *latch, keys []string, fire func(latchAnswer, func())) (w *watcher, ans latchAnswer, ready bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.data[keys[0]] != nil {
		ans.flags = arrivedClosed
		st.doneLocked(&ans, keys)
		return nil, ans, true, nil
	}
	for i := 0; i < len(l.create); i += 2 {
		if st.data[string(l.create[i])] != nil {
			return nil, latchAnswer{flags: arrivedConflict, conflict: i / 2}, true, nil
		}
	}
	counter := string(l.counter)
	var cur int64
	old := st.data[counter]
	if old != nil {
		if cur, err = strconv.ParseInt(string(old.value), 10, 64); err != nil || cur == math.MaxInt64 {
			return nil, ans, false, notCounter(counter, old.value, err)
		}
	}
	n := cur + 1
	count := strconv.AppendInt(nil, n, 10)
	// Everything the arrival stores is reserved at once, so that a refusal changes
	// nothing.
	cost := entryCost(counter, count)
	if old != nil && old.owner == a.share {
		cost -= old.cost
	}
	for i := 0; i < len(l.create); i += 2 {
		cost += entryCost(string(l.create[i]), l.create[i+1])
	}
	if n == l.target {
		cost += entryCost(keys[0], l.doneValue)
	}
	waits := n < l.target
	wcost := waitCost(len(keys), func(i int) int { return len(keys[i]) })
	if waits {
		if err := st.pendingBoundsLocked(a, wcost); err != nil {
			return nil, ans, false, err
		}
	}
	what := func() string { return fmt.Sprintf("arriving at %q", keys[0]) }
	if err := a.reserveFor(what, cost); err != nil {
		return nil, ans, false, err
	}
	if waits {
		if err := st.chargePendingLocked(a, wcost); err != nil {
			a.release(cost)
			return nil, ans, false, err
		}
	}
	// Reserved: store without reserving again.
	put := func(key string, value []byte) {
		e := st.data[key]
		if e != nil && e.owner != a.share {
			e.owner.release(e.cost)
		}
		st.data[key] = &entry{value: value, owner: a.share, cost: entryCost(key, value)}
		st.notifyLocked(key)
	}
	for i := 0; i < len(l.create); i += 2 {
		put(string(l.create[i]), clone(l.create[i+1]))
	}
	put(counter, count)
	ans.count = n
	if n == l.target {
		put(keys[0], clone(l.doneValue))
	}
	if !waits {
		if n == l.target || st.data[keys[0]] != nil {
			st.doneLocked(&ans, keys)
		}
		return nil, ans, true, nil
	}
	w = &watcher{owner: a, keys: keys[:1], cost: wcost, value: true}
	w.fire = func(_ []byte, release func()) {
		// Run by notifyLocked with st.mu held: Done exists now.
		done := latchAnswer{count: n}
		st.doneLocked(&done, keys)
		fire(done, release)
	}
	st.linkLocked(w, 0)
	return w, ans, false, nil
}

// notCounter is why a latch's counter cannot count one more arrival: parsing it failed
// with err, or it is at the largest int64.
func notCounter(key string, value []byte, err error) error {
	if err != nil {
		return fmt.Errorf("%w: value of %q is not a decimal int64: %q", ErrNotCounter, key, value[:min(len(value), 32)])
	}
	return fmt.Errorf("%w: adding 1 to %s under %q overflows int64", ErrNotCounter, value, key)
}

// clone copies a value out of a frame (an empty value stays non-nil).
func clone(b []byte) []byte { return append([]byte{}, b...) }

// arrive handles an arrive request: answered at once, or once the latch's done key
// exists (from the goroutine that created it, as for a blocked get).
func (c *serverConn) arrive(f frame) error {
	l, err := parseArrive(f)
	if err != nil {
		return err
	}
	if err := l.invalid(); err != nil {
		return c.failWith(f, err)
	}
	all := append([][]byte{l.done}, l.read...)
	if err := c.s.st.roomToWait(c.acct, waitCost(len(all), func(i int) int { return len(all[i]) })); err != nil {
		return c.failWith(f, err)
	}
	keys, err := keyFields(all)
	if err != nil {
		return err
	}
	if err := c.addPending(f.id); err != nil {
		return err
	}
	w, ans, ready, err := c.s.st.arriveLatch(c.acct, &l, keys, c.deliverArrived(f.id))
	switch {
	case err != nil:
		c.settle(f.id, nil)
		return c.failWith(f, err)
	case ready:
		c.settle(f.id, nil)
		return c.reply(f.id, f.op, statusOK, ans.fields()...)
	}
	c.settle(f.id, func() bool { return c.s.st.cancel(w) })
	return nil
}

// deliverArrived is deliverer for an arrival's answer: what the store calls, with its
// lock held, once the latch's done key exists.
func (c *serverConn) deliverArrived(id uint32) func(latchAnswer, func()) {
	return func(a latchAnswer, release func()) { c.deliver(id, opArrive, release, a.fields()...) }
}
