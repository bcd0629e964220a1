package rendezvous

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankArrival is rank's arrival at the latch "l" of world ranks: its marker, rank 0's id,
// and the others' read of the id.
func rankArrival(rank, world int) Arrival {
	a := Arrival{Done: "l/done", DoneValue: []byte("ok"), Counter: "l/count", Target: int64(world),
		Create: []KeyValue{{Key: "l/rank/" + strconv.Itoa(rank), Value: []byte{1}}}}
	if rank == 0 {
		a.Create = append(a.Create, KeyValue{Key: "l/id", Value: []byte("the id")})
	} else {
		a.Read = []string{"l/id"}
	}
	return a
}

func TestArriveAnswersEveryoneOnceAllArrived(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	const world = 8
	ctx := ctxTimeout(t, 30*time.Second)
	var wg sync.WaitGroup
	got := make([]Arrived, world)
	errs := make([]error, world)
	var answered atomic.Int32
	// Every rank but the last arrives and waits: none is answered before the last.
	for r := range world - 1 {
		c := dial(t, addr)
		wg.Go(func() {
			got[r], errs[r] = c.Arrive(ctx, rankArrival(r, world))
			answered.Add(1)
		})
	}
	eventually(t, "seven arrivals wait", func() bool { return s.st.numPending() == world-1 })
	assert.Zero(t, answered.Load(), "answered before the last arrived")
	last, err := dial(t, addr).Arrive(ctx, rankArrival(world-1, world))
	require.NoError(t, err)
	wg.Wait()
	got[world-1] = last
	var counts []int64
	for r, a := range got {
		require.NoError(t, errs[r], "rank %d", r)
		assert.False(t, a.Closed, "rank %d", r)
		assert.Equal(t, -1, a.Conflict, "rank %d", r)
		assert.Equal(t, "ok", string(a.Done), "rank %d", r)
		if r == 0 {
			assert.Empty(t, a.Values)
		} else {
			require.Len(t, a.Values, 1)
			assert.Equal(t, "the id", string(a.Values[0]), "rank %d", r)
		}
		counts = append(counts, a.Count)
	}
	slices.Sort(counts)
	assert.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, counts, "each arrival counted once")
	v, err := dial(t, addr).Get(ctx, "l/count")
	require.NoError(t, err)
	assert.Equal(t, "8", string(v))
	eventually(t, "no wait left", func() bool { return s.st.numPending() == 0 })
}

func TestArriveAtAClosedLatchChangesNothing(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "l/done", []byte("abandoned 3 deadline")))
	require.NoError(t, c.Set(ctx, "l/id", []byte("old id")))
	a, err := c.Arrive(ctx, rankArrival(1, 4))
	require.NoError(t, err)
	assert.True(t, a.Closed)
	assert.Zero(t, a.Count)
	assert.Equal(t, "abandoned 3 deadline", string(a.Done))
	assert.Equal(t, [][]byte{[]byte("old id")}, a.Values)
	present, err := c.Check(ctx, "l/count", "l/rank/1")
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false}, present, "neither counted nor marked")
}

func TestArriveWithAKeyThatExistsChangesNothing(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	// A restarted rank 0: its marker is new, the id its earlier incarnation published
	// is not.
	require.NoError(t, c.Set(ctx, "l/id", []byte("earlier id")))
	a, err := c.Arrive(ctx, rankArrival(0, 4))
	require.NoError(t, err)
	assert.Equal(t, 1, a.Conflict, "the id, second in Create")
	assert.False(t, a.Closed)
	assert.Zero(t, a.Count)
	assert.Nil(t, a.Done)
	present, err := c.Check(ctx, "l/count", "l/rank/0", "l/done")
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false}, present)
	v, err := c.Get(ctx, "l/id")
	require.NoError(t, err)
	assert.Equal(t, "earlier id", string(v))
}

func TestArriveWaitEndsWhenAnotherClosesTheLatch(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 30*time.Second)
	done := make(chan Arrived, 1)
	go func() {
		a, err := c.Arrive(ctx, rankArrival(1, 4))
		assert.NoError(t, err)
		done <- a
	}()
	eventually(t, "the arrival waits", func() bool { return s.st.numPending() == 1 })
	// Rank 0 never came: another rank gives up and closes the latch.
	_, swapped, err := dial(t, addr).CompareAndSet(ctx, "l/done", nil, []byte("abandoned 2 deadline"))
	require.NoError(t, err)
	require.True(t, swapped)
	a := <-done
	assert.Equal(t, int64(1), a.Count)
	assert.False(t, a.Closed, "it arrived while the latch was open")
	assert.Equal(t, "abandoned 2 deadline", string(a.Done))
	assert.Equal(t, [][]byte{nil}, a.Values, "the id was never published")
}

func TestArriveCancelledOnTheServerStaysCounted(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	c := dial(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := c.Arrive(ctx, rankArrival(1, 2))
		errs <- err
	}()
	eventually(t, "the arrival waits", func() bool { return s.st.numPending() == 1 })
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	eventually(t, "the server forgets the wait", func() bool { return s.st.numPending() == 0 })
	v, err := c.Get(ctxTimeout(t, 10*time.Second), "l/count")
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
	// Arriving again under the same marker is a conflict, not a second count.
	a, err := c.Arrive(ctxTimeout(t, 10*time.Second), rankArrival(1, 2))
	require.NoError(t, err)
	assert.Equal(t, 0, a.Conflict)
}

func TestArrivePastTheTargetIsAnsweredAtOnce(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	_, err := c.Add(ctx, "l/count", 2) // two arrivals counted by Add, not by Arrive
	require.NoError(t, err)
	a, err := c.Arrive(ctx, rankArrival(1, 2))
	require.NoError(t, err)
	assert.Equal(t, int64(3), a.Count)
	assert.Nil(t, a.Done, "nobody completed the latch")
	assert.Nil(t, a.Values)
}

func TestArriveRefusalsChangeNothing(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t, WithMaxStoreBytes(4<<20), WithMaxClientBytes(256<<10))
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	t.Run("not a counter", func(t *testing.T) {
		require.NoError(t, c.Set(ctx, "n/count", []byte("many")))
		_, err := c.Arrive(ctx, Arrival{Done: "n/done", Counter: "n/count", Target: 1, Create: []KeyValue{{Key: "n/mark"}}})
		require.ErrorIs(t, err, ErrNotCounter)
		present, err := c.Check(ctx, "n/mark", "n/done")
		require.NoError(t, err)
		assert.Equal(t, []bool{false, false}, present)
	})
	t.Run("counter at its largest", func(t *testing.T) {
		require.NoError(t, c.Set(ctx, "m/count", []byte("9223372036854775807")))
		_, err := c.Arrive(ctx, Arrival{Done: "m/done", Counter: "m/count", Target: 1, Create: []KeyValue{{Key: "m/mark"}}})
		require.ErrorIs(t, err, ErrNotCounter)
		assert.Contains(t, err.Error(), `adding 1 to 9223372036854775807 under "m/count" overflows int64`)
		present, err := c.Check(ctx, "m/mark", "m/done")
		require.NoError(t, err)
		assert.Equal(t, []bool{false, false}, present)
	})
	t.Run("store full", func(t *testing.T) {
		before := s.charged()
		big := make([]byte, 200<<10) // each fits the share, the two do not
		_, err := c.Arrive(ctx, Arrival{Done: "f/done", Counter: "f/count", Target: 1,
			Create: []KeyValue{{Key: "f/a", Value: big}, {Key: "f/b", Value: big}}})
		require.ErrorIs(t, err, ErrStoreFull)
		present, err := c.Check(ctx, "f/a", "f/b", "f/count", "f/done")
		require.NoError(t, err)
		assert.Equal(t, []bool{false, false, false, false}, present)
		eventually(t, "the budget is back", func() bool { return s.charged() == before })
	})
}

func TestArriveArguments(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	ok := Arrival{Done: "d", Counter: "c", Target: 2}
	tests := []struct {
		name string
		edit func(a *Arrival)
		want string
	}{
		{"target zero", func(a *Arrival) { a.Target = 0 }, "target 0, want at least 1"},
		{"empty done key", func(a *Arrival) { a.Done = "" }, "empty key"},
		{"empty counter", func(a *Arrival) { a.Counter = "" }, "empty key"},
		{"done is the counter", func(a *Arrival) { a.Counter = "d" }, `done key and counter are both "d"`},
		{"create the done key", func(a *Arrival) { a.Create = []KeyValue{{Key: "d"}} }, `key to create "d" is the latch's done key or counter`},
		{"create twice", func(a *Arrival) { a.Create = []KeyValue{{Key: "k"}, {Key: "k"}} }, `key to create "k" named twice`},
		{"long read key", func(a *Arrival) { a.Read = []string{string(make([]byte, MaxKeyLen+1))} }, "exceeds the limit of 1024"},
		{"value too large", func(a *Arrival) { a.DoneValue = make([]byte, MaxValueLen+1) }, "exceeds the limit"},
		{"too many keys", func(a *Arrival) { a.Read = make([]string, MaxKeysPerRequest) }, "over the limit of 4097"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok
			tt.edit(&a)
			_, err := c.Arrive(ctx, a)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.Zero(t, s.st.numKeys(), "no refused arrival reached the store")
}

// arriveFields encodes an arrive request by hand.
func arriveFields(done, counter string, target uint64, create, read []string) [][]byte {
	fs := [][]byte{[]byte(done), []byte("ok"), []byte(counter), binary.BigEndian.AppendUint64(nil, target),
		binary.BigEndian.AppendUint64(nil, uint64(len(create)))}
	for _, k := range create {
		fs = append(fs, []byte(k), []byte{1})
	}
	for _, k := range read {
		fs = append(fs, []byte(k))
	}
	return fs
}

func TestServerValidatesArriveRequests(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	refused := []struct {
		name   string
		fields [][]byte
		want   string
	}{
		{"target zero", arriveFields("d", "c", 0, nil, nil), "target 0"},
		{"negative target", arriveFields("d", "c", 1<<63, nil, nil), "target -9223372036854775808"},
		{"done is the counter", arriveFields("d", "d", 1, nil, nil), "done key and counter"},
		{"create twice", arriveFields("d", "c", 1, []string{"k", "k"}, nil), "named twice"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			r := rawDial(t, addr)
			_, hello := r.hello(ProtocolVersion)
			require.Equal(t, statusOK, hello.status)
			r.send(opArrive, 7, tt.fields...)
			f, err := r.recv()
			require.NoError(t, err)
			assert.Equal(t, statusInvalid, f.status)
			require.Len(t, f.fields, 1)
			assert.Contains(t, string(f.fields[0]), tt.want)
		})
	}
	malformed := []struct {
		name   string
		fields [][]byte
	}{
		{"too few fields", arriveFields("d", "c", 1, nil, nil)[:4]},
		{"short target", append(arriveFields("d", "c", 1, nil, nil)[:3], []byte{1}, make([]byte, 8))},
		{"more pairs than fields", append(arriveFields("d", "c", 1, nil, nil)[:4], binary.BigEndian.AppendUint64(nil, 3), []byte("k"))},
		{"empty key to create", arriveFields("d", "c", 1, []string{""}, nil)},
		{"empty read key", arriveFields("d", "c", 1, nil, []string{""})},
	}
	for _, tt := range malformed {
		t.Run(tt.name, func(t *testing.T) {
			r := rawDial(t, addr)
			r.hello(ProtocolVersion)
			r.send(opArrive, 7, tt.fields...)
			assert.True(t, r.closedByPeer(), "a malformed arrive closes the connection")
		})
	}
	assert.Zero(t, s.st.numKeys())
}

func TestArriveLatchOfManyParties(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	const world = 64
	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, world)
	for r := range world {
		c := dial(t, addr)
		wg.Go(func() {
			a, err := c.Arrive(ctx, rankArrival(r, world))
			switch {
			case err != nil:
				errs <- err
			case string(a.Done) != "ok" || (r != 0 && string(a.Values[0]) != "the id"):
				errs <- fmt.Errorf("rank %d: %+v", r, a)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestArriveRefusesMalformedReplies(t *testing.T) {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	ok := latchAnswer{flags: arrivedDone, count: 2, done: []byte("ok"), present: []byte{1}, values: [][]byte{[]byte("id")}}.fields()
	got, err := decodeArrived(ok, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, Arrived{Count: 2, Conflict: -1, Done: []byte("ok"), Values: [][]byte{[]byte("id")}}, got)
	for name, fields := range map[string][][]byte{
		"no fields":              nil,
		"short count":            {{arrivedDone}, {1}, u64(0)},
		"conflict out of range":  {{arrivedConflict}, u64(0), u64(1)},
		"negative conflict":      {{arrivedConflict}, u64(0), u64(1 << 63)},
		"values missing":         ok[:5],
		"presence of wrong size": append(append([][]byte{}, ok[:4]...), []byte{1, 1}, []byte("id")),
		"fields after no done":   {{0}, u64(3), u64(0), []byte("x")},
	} {
		_, err := decodeArrived(fields, 1, 1)
		require.ErrorIs(t, err, ErrProtocol, name)
	}
}
