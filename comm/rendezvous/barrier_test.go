package rendezvous

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
)

func TestBarrierReleasesAllRanksTogether(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	const world = 16
	ctx := ctxTimeout(t, 10*time.Second)
	key := GenerationKey("test", 3, "barrier")
	assert.Equal(t, "ncclgo/test/gen/3/barrier", key)

	var arrived sync.WaitGroup
	arrived.Add(world - 1)
	var wg sync.WaitGroup
	errs := make([]error, world)
	for r := range world - 1 {
		c := dial(t, addr)
		wg.Go(func() {
			arrived.Done()
			errs[r] = c.Barrier(ctx, key, r, world)
		})
	}
	arrived.Wait()
	last := dial(t, addr)
	eventually(t, "the first ranks block", func() bool {
		missing, err := last.missingRanks(ctx, key, world)
		return err == nil && len(missing) == 1
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d passed before the last rank arrived", r)
	}
	require.NoError(t, last.Barrier(ctx, key, world-1, world))
	wg.Wait()
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

func TestBarrierNamesTheMissingRanks(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	const world = 6
	missing := map[int]bool{1: true, 4: true}
	key := GenerationKey("test", 0, "barrier")
	// The deadline passes once every rank that comes has arrived, however slow the
	// machine.
	ctx, expire := nettest.ExpiringContext()

	var wg sync.WaitGroup
	errs := make([]error, world)
	probe := dial(t, addr)
	for r := range world {
		if missing[r] {
			continue
		}
		c := dial(t, addr)
		wg.Go(func() { errs[r] = c.Barrier(ctx, key, r, world) })
	}
	eventually(t, "the ranks that come have arrived", func() bool {
		m, err := probe.missingRanks(context.Background(), key, world)
		return err == nil && len(m) == 2
	})
	start := time.Now()
	expire()
	wg.Wait()
	assert.Less(t, time.Since(start), 10*time.Second, "ranks fail at their deadline, not later")
	for r, err := range errs {
		if missing[r] {
			continue
		}
		var be *BarrierError
		require.True(t, errors.As(err, &be), "rank %d: %v", r, err)
		assert.Equal(t, []int{1, 4}, be.Missing)
		assert.Equal(t, world, be.World)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, `barrier "ncclgo/test/gen/0/barrier": 2 of 6 ranks missing: [1 4]: context deadline exceeded`, err.Error())
	}
}

func TestBarrierArguments(t *testing.T) {
	noLeaks(t)
	_, addr := startServer(t)
	c := dial(t, addr)
	ctx := ctxTimeout(t, 5*time.Second)
	tests := []struct {
		name        string
		key         string
		rank, world int
		want        string
	}{
		{"world zero", "b", 0, 0, "world size 0, want 1..1048576"},
		{"negative rank", "b", -1, 4, "rank -1 outside [0, 4)"},
		{"rank equal to world", "b", 4, 4, "rank 4 outside [0, 4)"},
		{"empty key", "", 0, 1, "empty key"},
		{"long key", string(make([]byte, MaxKeyLen+1)), 0, 1, "exceeds the limit of 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Barrier(ctx, tt.key, tt.rank, tt.world)
			require.ErrorIs(t, err, ErrInvalidArgument)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	t.Run("key reused", func(t *testing.T) {
		require.NoError(t, c.Barrier(ctx, "once", 0, 1))
		err := c.Barrier(ctx, "once", 0, 1)
		require.ErrorIs(t, err, ErrInvalidArgument)
		assert.Contains(t, err.Error(), `barrier "once": rank 0 arrived again after the barrier completed (key reused?)`)
	})
}

func TestBarrierReportsALostConnection(t *testing.T) {
	noLeaks(t)
	s, addr := startServer(t)
	c := dial(t, addr)
	errs := make(chan error, 1)
	go func() { errs <- c.Barrier(context.Background(), "b", 0, 2) }()
	eventually(t, "the barrier waits", func() bool { return pendingOn(t, addr) })
	require.NoError(t, s.Close())
	err := <-errs
	require.ErrorIs(t, err, ErrClosed)
	var be *BarrierError
	assert.False(t, errors.As(err, &be), "no missing-rank list without a deadline")
}

// Where the server knows the job's world (WithWorld), no client can poison a barrier
// key: arriving first as a world of 1000, or completing the barrier early as a world
// of one, is refused to that client alone, and the job's ranks pass the barrier.
// Without WithWorld, both arrivals are accepted and every rank then fails.
func TestBarrierOfAnotherWorldIsRefusedToItsCallerAlone(t *testing.T) {
	noLeaks(t)
	const token, world = "barrier-world-token-0123456789", 4
	_, addr := startServer(t, WithToken(token), WithWorld(world))
	ctx := ctxTimeout(t, 30*time.Second)
	poisoner := dial(t, addr, WithToken(token), fromHost(2))
	for _, p := range []struct {
		key         string
		rank, world int
	}{{"job/b1", 5, 1000}, {"job/b2", 0, 1}} {
		err := poisoner.Barrier(ctx, p.key, p.rank, p.world)
		require.ErrorIs(t, err, ErrInvalidArgument, "a barrier arrival for a world of %d", p.world)
		assert.Contains(t, err.Error(), "this store serves a job of 4 ranks")
	}
	var wg sync.WaitGroup
	errs := make([]error, world)
	for rank := range world {
		c := dial(t, addr, WithToken(token))
		wg.Go(func() {
			for _, key := range []string{"job/b1", "job/b2"} {
				if errs[rank] = c.Barrier(ctx, key, rank, world); errs[rank] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	for rank, err := range errs {
		require.NoError(t, err, "rank %d", rank)
	}
}
