package rendezvous

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
)

func TestStoreOperations(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	require.NoError(t, c.Set(ctx, "a", []byte("one")))
	got, err := c.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("one"), got)

	require.NoError(t, c.Set(ctx, "a", []byte("two")), "set replaces")
	got, err = c.Get(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("two"), got)

	require.NoError(t, c.Set(ctx, "empty", nil))
	got, err = c.Get(ctx, "empty")
	require.NoError(t, err)
	assert.Empty(t, got)

	n, err := c.Add(ctx, "n", 5)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)
	n, err = c.Add(ctx, "n", -7)
	require.NoError(t, err)
	assert.Equal(t, int64(-2), n)
	got, err = c.Get(ctx, "n")
	require.NoError(t, err)
	assert.Equal(t, []byte("-2"), got, "counters are decimal text")

	present, err := c.Check(ctx, "a", "missing", "n")
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, true}, present)

	require.NoError(t, c.Wait(ctx, "a", "n"), "wait on existing keys returns at once")
	require.NoError(t, c.Wait(ctx), "wait on no keys returns at once")

	deleted, err := c.Delete(ctx, "a")
	require.NoError(t, err)
	assert.True(t, deleted)
	deleted, err = c.Delete(ctx, "a")
	require.NoError(t, err)
	assert.False(t, deleted)
	present, err = c.Check(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, present)
}

func TestCompareAndSet(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	tests := []struct {
		name        string
		old, new    []byte
		wantSwapped bool
		wantCurrent []byte
	}{
		{"create if absent", nil, []byte("v1"), true, []byte("v1")},
		{"create again fails", nil, []byte("x"), false, []byte("v1")},
		{"wrong expectation", []byte("v0"), []byte("x"), false, []byte("v1")},
		{"right expectation", []byte("v1"), []byte("v2"), true, []byte("v2")},
		{"empty expectation does not mean absent", []byte{}, []byte("x"), false, []byte("v2")},
		{"set to empty", []byte("v2"), []byte{}, true, []byte{}},
		{"empty expectation matches empty", []byte{}, []byte("v3"), true, []byte("v3")},
	}
	for _, tt := range tests {
		cur, swapped, err := c.CompareAndSet(ctx, "cas", tt.old, tt.new)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.wantSwapped, swapped, tt.name)
		assert.Equal(t, tt.wantCurrent, cur, tt.name)
	}

	cur, swapped, err := c.CompareAndSet(ctx, "absent", []byte("v"), []byte("x"))
	require.NoError(t, err)
	assert.False(t, swapped)
	assert.Nil(t, cur, "no current value for a missing key")
}

func TestGetBlocksUntilALaterSet(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	getter, setter := dial(t, addr), dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	got := make(chan []byte, 1)
	errs := make(chan error, 1)
	go func() {
		v, err := getter.Get(ctx, "late")
		errs <- err
		got <- v
	}()
	// The getter's request is on the server before the set (pending watcher).
	eventually(t, "the get is blocked on the server", func() bool { return pendingOn(t, addr) })
	select {
	case <-errs:
		t.Fatal("get returned before the key was set")
	default:
	}
	require.NoError(t, getter.Set(ctx, "other", []byte("x")), "the same client still works while its get blocks")
	require.NoError(t, setter.Set(ctx, "late", []byte("hello")))
	require.NoError(t, <-errs)
	assert.Equal(t, []byte("hello"), <-got)
}

// pendingOn reports whether the server behind addr holds a blocked request.
func pendingOn(t testing.TB, addr string) bool {
	s := servers.lookup(addr)
	require.NotNil(t, s)
	return s.st.numPending() > 0
}

func TestGetHonoursTheContextDeadlineAndCancelsOnTheServer(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	c := dial(t, addr)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Get(ctx, "never")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), `get "never"`)
	assert.Less(t, time.Since(start), 10*time.Second, "fails near its deadline, not later")

	eventually(t, "the server forgot the cancelled get", func() bool {
		return s.st.numPending() == 0
	})

	// The client is still usable, and a set now does not reach the cancelled get.
	ctx2 := ctxTimeout(t, 10*time.Second)
	require.NoError(t, c.Set(ctx2, "never", []byte("late")))
	v, err := c.Get(ctx2, "never")
	require.NoError(t, err)
	assert.Equal(t, []byte("late"), v)
}

func TestWaitNeedsEveryKeyEvenAfterADelete(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c, other := dial(t, addr), dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)

	require.NoError(t, other.Set(ctx, "a", nil))
	done := make(chan error, 1)
	go func() { done <- c.Wait(ctx, "a", "b", "c", "b") }()
	eventually(t, "the wait is blocked", func() bool { return pendingOn(t, addr) })

	_, err := other.Delete(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, other.Set(ctx, "b", nil))
	require.NoError(t, other.Set(ctx, "c", nil))
	select {
	case err := <-done:
		t.Fatalf("wait returned (%v) although key a was deleted", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, other.Set(ctx, "a", nil))
	require.NoError(t, <-done)
}

func TestAddIsAtomicUnderManyGoroutines(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	const clients, goroutines, adds = 8, 8, 50
	ctx := ctxTimeout(t, 20*time.Second)
	var wg sync.WaitGroup
	seen := make(chan int64, clients*goroutines*adds)
	for range clients {
		c := dial(t, addr)
		for range goroutines {
			wg.Go(func() {
				for range adds {
					n, err := c.Add(ctx, "counter", 1)
					if !assert.NoError(t, err) {
						return
					}
					seen <- n
				}
			})
		}
	}
	wg.Wait()
	close(seen)
	// Every value 1..total came back exactly once.
	got := make(map[int64]int)
	for n := range seen {
		got[n]++
	}
	const total = clients * goroutines * adds
	require.Len(t, got, total)
	for i := int64(1); i <= total; i++ {
		assert.Equal(t, 1, got[i], "value %d", i)
	}
}

func TestCompareAndSetRaces(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	ctx := ctxTimeout(t, 20*time.Second)
	const clients, increments = 8, 25

	// Exactly one creator wins.
	var wg sync.WaitGroup
	winners := make(chan int, clients)
	cs := make([]*Client, clients)
	for i := range cs {
		cs[i] = dial(t, addr)
	}
	for i, c := range cs {
		wg.Go(func() {
			_, swapped, err := c.CompareAndSet(ctx, "leader", nil, []byte(strconv.Itoa(i)))
			assert.NoError(t, err)
			if swapped {
				winners <- i
			}
		})
	}
	wg.Wait()
	close(winners)
	var won []int
	for i := range winners {
		won = append(won, i)
	}
	require.Len(t, won, 1)
	v, err := cs[0].Get(ctx, "leader")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(won[0]), string(v))

	// Read-modify-CAS loops lose no increment.
	for _, c := range cs {
		wg.Go(func() {
			cur := []byte("0")
			for done := 0; done < increments; {
				n, _ := strconv.Atoi(string(cur))
				next := []byte(strconv.Itoa(n + 1))
				now, swapped, err := c.CompareAndSet(ctx, "cas-counter", cur, next)
				if !assert.NoError(t, err) {
					return
				}
				if swapped {
					done++
				}
				cur = now
				if cur == nil { // not created yet
					_, _, err = c.CompareAndSet(ctx, "cas-counter", nil, []byte("0"))
					assert.NoError(t, err)
					cur = []byte("0")
				}
			}
		})
	}
	wg.Wait()
	v, err = cs[0].Get(ctx, "cas-counter")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(clients*increments), string(v))
}

func TestStoreErrors(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t, WithMaxStoreBytes(64<<10))
	c := dial(t, addr)
	ctx := ctxTimeout(t, 10*time.Second)
	require.NoError(t, c.Set(ctx, "text", []byte("not a number")))
	_, err := c.Add(ctx, "max", 1<<62)
	require.NoError(t, err)
	n, err := c.Add(ctx, "max", 1<<62-1)
	require.NoError(t, err)
	require.Equal(t, int64(math.MaxInt64), n)

	long := string(make([]byte, MaxKeyLen+1))
	tests := []struct {
		name string
		call func() error
		want error
		msg  string
	}{
		{"add to text", func() error { _, err := c.Add(ctx, "text", 1); return err }, ErrNotCounter, `value of "text" is not a decimal int64`},
		{"add overflows", func() error { _, err := c.Add(ctx, "max", 1); return err }, ErrNotCounter, "overflows int64"},
		{"store full", func() error { return c.Set(ctx, "big", make([]byte, 40<<10)) }, ErrStoreFull, "would exceed the server's memory budget of 65536 bytes"},
		{"empty key", func() error { return c.Set(ctx, "", nil) }, ErrInvalidArgument, "empty key"},
		{"long key", func() error { _, err := c.Get(ctx, long); return err }, ErrInvalidArgument, "key of 1025 bytes exceeds the limit of 1024"},
		{"large value", func() error { return c.Set(ctx, "v", make([]byte, MaxValueLen+1)) }, ErrInvalidArgument, "value of 1048577 bytes exceeds the limit of 1048576"},
		{"too many keys", func() error { return c.Wait(ctx, make([]string, MaxKeysPerRequest+1)...) }, ErrInvalidArgument, "4097 keys exceed the limit of 4096"},
		{"keys too large together", func() error {
			keys := make([]string, MaxKeysPerRequest)
			for i := range keys {
				keys[i] = fmt.Sprintf("%01000d", i)
			}
			_, err := c.Check(ctx, keys...)
			return err
		}, ErrInvalidArgument, "exceeds the frame limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
	// None of these broke the connection.
	require.NoError(t, c.Set(ctx, "ok", []byte("1")))
}

func TestCloseFailsPendingCalls(t *testing.T) {
	noLeaks(t)
	t.Run("client close", func(t *testing.T) {
		_, addr := startServer(t)
		c := dial(t, addr)
		errs := make(chan error, 1)
		go func() { _, err := c.Get(context.Background(), "never"); errs <- err }()
		eventually(t, "the get is blocked", func() bool { return pendingOn(t, addr) })
		require.NoError(t, c.Close())
		err := <-errs
		require.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), "client closed")
		require.ErrorIs(t, c.Set(context.Background(), "k", nil), ErrClosed, "calls after close fail")
		require.NoError(t, c.Close(), "second close")
	})
	t.Run("server close", func(t *testing.T) {
		s, addr := startServer(t)
		c := dial(t, addr)
		errs := make(chan error, 1)
		go func() { errs <- c.Wait(context.Background(), "never") }()
		eventually(t, "the wait is blocked", func() bool { return pendingOn(t, addr) })
		require.NoError(t, s.Close())
		err := <-errs
		require.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), "connection to "+addr+" lost")
		l, lerr := netListen()
		require.NoError(t, lerr)
		require.ErrorIs(t, s.Serve(context.Background(), l), ErrClosed, "serve after close")
	})
}

func TestServeStopsWhenItsContextEnds(t *testing.T) {
	noLeaks(t)
	s := NewServer(WithLogger(discardLogger()))
	l, err := netListen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, l) }()
	c := dial(t, l.Addr().String())
	require.NoError(t, c.Set(ctxTimeout(t, 5*time.Second), "k", nil))
	cancel()
	require.NoError(t, <-served)
	require.NoError(t, s.Close())
	_, err = c.Get(ctxTimeout(t, 5*time.Second), "k2")
	require.ErrorIs(t, err, ErrClosed)
}

func TestDialRetriesUntilTheServerListens(t *testing.T) {
	noLeaks(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(nettest.Port(t)))

	t.Run("gives up at the deadline", func(t *testing.T) {
		err := dialPastARefusal(t, addr)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "dial "+addr)
		assert.Contains(t, err.Error(), "refused")
	})
	t.Run("connects once the server starts", func(t *testing.T) {
		result := make(chan error, 1)
		go func() {
			c, err := Dial(ctxTimeout(t, 10*time.Second), addr)
			if err == nil {
				err = c.Close()
			}
			result <- err
		}()
		time.Sleep(50 * time.Millisecond)
		s := NewServer(WithLogger(discardLogger()))
		served := make(chan error, 1)
		go func() { served <- s.ListenAndServe(context.Background(), addr) }()
		require.NoError(t, <-result)
		require.NoError(t, s.Close())
		require.NoError(t, <-served)
	})
}

func TestIdleTimeoutSparesClientsThatWait(t *testing.T) {
	noLeaks(t)
	// An idle timeout long enough that keepalives every third of it arrive in time on a
	// loaded machine: with one second, the server closed both connections in a CI run
	// while `go test -race ./...` and other builds kept both cores busy.
	const idle = 4 * time.Second
	s, addr := startServer(t, WithIdleTimeout(idle))
	c, setter := dial(t, addr), dial(t, addr)
	ctx := ctxTimeout(t, 60*time.Second)
	assert.Equal(t, idle, c.idle, "the server announces its idle timeout")

	got := make(chan error, 1)
	go func() { _, err := c.Get(ctx, "slow"); got <- err }()
	// More than two idle periods pass with the get blocked; keepalives hold the connection.
	time.Sleep(idle*2 + idle/2)
	assert.Equal(t, 2, s.numConns())
	require.NoError(t, setter.Set(ctx, "slow", []byte("x")))
	require.NoError(t, <-got)
}

func TestCloseWritesRepliesAlreadyDue(t *testing.T) {
	noLeaks(t)
	// Rank 0 embeds the server: it passes the last barrier and closes the server at
	// once. The other ranks' wake-ups were due before Close, so they must arrive.
	s, addr := startServer(t)
	ctx := ctxTimeout(t, 10*time.Second)
	const waiters = 50
	errs := make(chan error, waiters)
	for range waiters {
		c := dial(t, addr)
		go func() { errs <- c.Wait(ctx, "done") }()
	}
	eventually(t, "all waits are blocked", func() bool {
		return s.st.numPending() == waiters
	})
	last := dial(t, addr)
	require.NoError(t, last.Set(ctx, "done", nil))
	require.NoError(t, s.Close())
	for range waiters {
		assert.NoError(t, <-errs)
	}
}

func TestZeroValuesDoNotPanic(t *testing.T) {
	noLeaks(t)
	var s Server // the zero value serves with the defaults
	l, err := netListen()
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), l) }()
	c := dial(t, l.Addr().String())
	ctx := ctxTimeout(t, 5*time.Second)
	require.NoError(t, c.Set(ctx, "k", []byte("v")))
	require.NoError(t, c.Close())
	require.NoError(t, s.Close())
	require.NoError(t, <-served)

	require.ErrorIs(t, new(Server).Serve(ctx, nil), ErrInvalidArgument)
	require.NoError(t, new(Server).Close())

	var zero Client
	require.ErrorIs(t, zero.Set(ctx, "k", nil), ErrClosed)
	_, err = zero.Get(ctx, "k")
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, zero.Close())
}

// A wait for many keys waits for one missing key at a time: the store holds one entry
// for it however many keys it names, it fires once, when the last key comes, whatever
// order the keys come in, and a key deleted after it was seen is waited for again.
func TestWaitForManyKeysHoldsOneEntry(t *testing.T) {
	b := &budget{limit: 1 << 30}
	st := newStore(b)
	a := &account{share: &share{b: b, id: "test", limit: b.limit}}
	const n = 1000
	keys := make([]string, 0, n+2)
	for i := range n {
		keys = append(keys, "k/"+strconv.Itoa(i))
	}
	keys = append(keys, "k/7", "k/999") // duplicates
	fired := 0
	var releases []func() // called after the store's lock is released, as replies are
	_, _, ready, err := st.wait(a, keys, false, func(_ []byte, release func()) { fired++; releases = append(releases, release) })
	require.NoError(t, err)
	require.False(t, ready)
	require.Len(t, st.watchers, 1, "a wait for %d keys registered on more than one", n)
	require.Equal(t, 1, st.numPending())
	for i := n - 1; i >= 1; i-- { // every key but k/0, in reverse order
		require.NoError(t, st.set(a, "k/"+strconv.Itoa(i), nil))
		require.LessOrEqual(t, len(st.watchers), 1)
	}
	require.True(t, st.delete("k/500"))
	require.NoError(t, st.set(a, "k/0", nil))
	require.Zero(t, fired, "fired although k/500 was deleted")
	require.Contains(t, st.watchers, "k/500")
	require.NoError(t, st.set(a, "k/500", nil))
	require.Equal(t, 1, fired)
	require.Empty(t, st.watchers)
	releases[0]()
	require.Zero(t, st.numPending())
}
