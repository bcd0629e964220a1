package rendezvous

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func dialTorch(t *testing.T, addr string, p TorchProtocol) *TCPStoreClient {
	t.Helper()
	c, err := DialTCPStore(ctxTimeout(t, 30*time.Second), addr, WithTorchProtocol(p), WithLogger(discardLogger()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Ranks arriving over torch's protocol and over ncclgo's own meet at one latch, with
// Client.Arrive's answers: none before the last arrives, then all with the id.
func TestTCPStoreArriveMeetsClientArrive(t *testing.T) {
	for _, p := range []TorchProtocol{TorchProtocol1, TorchProtocol2} {
		t.Run(torchName(p), func(t *testing.T) {
			noLeaks(t)
			s, addr := startServer(t)
			const world = 6
			ctx := ctxTimeout(t, 30*time.Second)
			arrive := func(r int) (Arrived, error) {
				if r%2 == 0 {
					return dialTorch(t, addr, p).Arrive(ctx, rankArrival(r, world))
				}
				return dial(t, addr).Arrive(ctx, rankArrival(r, world))
			}
			var wg sync.WaitGroup
			got := make([]Arrived, world)
			errs := make([]error, world)
			for r := range world - 1 {
				wg.Go(func() { got[r], errs[r] = arrive(r) })
			}
			eventually(t, "five arrivals wait", func() bool { return s.st.numPending() == world-1 })
			got[world-1], errs[world-1] = arrive(world - 1)
			wg.Wait()
			var counts []int64
			for r, a := range got {
				require.NoError(t, errs[r], "rank %d", r)
				assert.False(t, a.Closed, "rank %d", r)
				assert.Equal(t, -1, a.Conflict, "rank %d", r)
				assert.Equal(t, "ok", string(a.Done), "rank %d", r)
				if r > 0 {
					assert.Equal(t, [][]byte{[]byte("the id")}, a.Values, "rank %d", r)
				}
				counts = append(counts, a.Count)
			}
			assert.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6}, counts)
			// Once more: the latch is closed, the answer comes at once and changes nothing.
			a, err := dialTorch(t, addr, p).Arrive(ctx, rankArrival(7, world))
			require.NoError(t, err)
			assert.True(t, a.Closed)
			assert.Equal(t, [][]byte{[]byte("the id")}, a.Values)
		})
	}
}

// A TCPStore client's arrival has Client.Arrive's outcomes and refusals, with its
// key prefix applied to every key.
func TestTCPStoreArriveOutcomesAndRefusals(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t, WithMaxStoreBytes(4<<20), WithMaxClientBytes(512<<10))
	ctx := ctxTimeout(t, 30*time.Second)
	tc := dialTorch(t, addr, TorchProtocol2)
	nc := dial(t, addr)

	require.NoError(t, nc.Set(ctx, "l/id", []byte("earlier id")))
	a, err := tc.Arrive(ctx, rankArrival(0, 4))
	require.NoError(t, err)
	assert.Equal(t, 1, a.Conflict, "the id, second in Create")
	assert.Zero(t, a.Count)

	require.NoError(t, nc.Set(ctx, "n/count", []byte("many")))
	_, err = tc.Arrive(ctx, Arrival{Done: "n/done", Counter: "n/count", Target: 1, Create: []KeyValue{{Key: "n/mark"}}})
	require.ErrorIs(t, err, ErrNotCounter)

	// The host's share holds 200 KiB more: the 150 KiB value fits the request's
	// buffers, not the store beside them.
	require.NoError(t, nc.Set(ctx, "f/held", make([]byte, 200<<10)))
	before := s.charged()
	_, err = tc.Arrive(ctx, Arrival{Done: "f/done", Counter: "f/count", Target: 1,
		Create: []KeyValue{{Key: "f/a", Value: make([]byte, 150<<10)}}})
	require.ErrorIs(t, err, ErrStoreFull)
	present, err := nc.Check(ctx, "n/mark", "f/a", "f/count")
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false}, present, "refusals change nothing")
	eventually(t, "the budget is back", func() bool { return s.charged() == before })

	_, err = tc.Arrive(ctx, Arrival{Done: "x", Counter: "x", Target: 1})
	require.ErrorIs(t, err, ErrInvalidArgument)

	prefixed, err := DialTCPStore(ctx, addr, WithKeyPrefix("job"), WithLogger(discardLogger()))
	require.NoError(t, err)
	defer prefixed.Close()
	a, err = prefixed.Arrive(ctx, Arrival{Done: "d", DoneValue: []byte("ok"), Counter: "c", Target: 1,
		Create: []KeyValue{{Key: "m", Value: []byte("v")}}, Read: []string{"m"}})
	require.NoError(t, err)
	assert.Equal(t, "ok", string(a.Done))
	assert.Equal(t, [][]byte{[]byte("v")}, a.Values)
	v, err := nc.Get(ctx, "job/d")
	require.NoError(t, err)
	assert.Equal(t, "ok", string(v))
}

// An arrival whose context ends closes its connection: the server forgets the wait,
// and the arrival stays counted.
func TestTCPStoreArriveCancelledStaysCounted(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	tc := dialTorch(t, addr, TorchProtocol2)
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() {
		_, err := tc.Arrive(ctx, rankArrival(1, 2))
		errs <- err
	}()
	eventually(t, "the arrival waits", func() bool { return s.st.numPending() == 1 })
	cancel()
	require.ErrorIs(t, <-errs, context.Canceled)
	eventually(t, "the server forgets the wait", func() bool { return s.st.numPending() == 0 })
	v, err := tc.Get(ctxTimeout(t, 10*time.Second), "l/count")
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
}

// Many torch connections, each with a pending arrival, are all answered by the last
// one's arrival, whatever order the answers are written in.
func TestTCPStoreArriveOfManyRanks(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	const world = 64
	ctx := ctxTimeout(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r := range world {
		wg.Go(func() {
			c, err := DialTCPStore(ctx, addr, WithLogger(discardLogger()))
			if err != nil {
				errs[r] = err
				return
			}
			defer c.Close()
			a, err := c.Arrive(ctx, rankArrival(r, world))
			switch {
			case err != nil:
				errs[r] = err
			case string(a.Done) != "ok" || (r > 0 && string(a.Values[0]) != "the id"):
				errs[r] = assert.AnError
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank "+strconv.Itoa(r))
	}
}
