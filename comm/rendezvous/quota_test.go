package rendezvous

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Writers with the token on 16 hosts fill the part of the budget that keys share;
// the ranks of the job still bring up: each connection brings its host room for its
// own keys and blocked requests (jobRoom) out of the part kept for connections, which
// no writer can take. It used to fail with "store full" (and new dials "server busy").
func TestJobKeysHaveRoomWhenWritersFillTheStore(t *testing.T) {
	noLeaks(t)
	const token, budget, world = "quota-test-token-0123456789abcdef", 8 << 20, 4
	_, addr := startServer(t, WithToken(token), WithMaxStoreBytes(budget))
	ctx := ctxTimeout(t, 60*time.Second)
	value := bytes.Repeat([]byte{'x'}, 64<<10)
	full := 0
	for h := range attackHosts {
		c := dial(t, addr, WithToken(token), fromHost(attackHost(h)))
		for i := 0; i < budget/len(value); i++ { // at most the whole budget
			if err := c.Set(ctx, "fill/"+strconv.Itoa(h)+"/"+strconv.Itoa(i), value); err != nil {
				require.ErrorIs(t, err, ErrStoreFull)
				full++
				break
			}
		}
	}
	require.Equal(t, attackHosts, full, "the writers did not fill the store")

	var wg sync.WaitGroup
	errs := make([]error, world)
	for rank := range world {
		c := dial(t, addr, WithToken(token))
		wg.Go(func() {
			key := GenerationKey("quota", 0, "")
			err := c.Set(ctx, key+"rank/"+strconv.Itoa(rank), []byte{1})
			if err == nil && rank == 0 {
				err = c.Set(ctx, key+"uid", make([]byte, 128))
			}
			if err == nil {
				err = c.Barrier(ctx, key+"barrier", rank, world)
			}
			if err == nil {
				_, err = c.Get(ctx, key+"uid")
			}
			errs[rank] = err
		})
	}
	wg.Wait()
	for rank, err := range errs {
		require.NoError(t, err, "rank %d", rank)
	}
}

// charged is what the budget counts: the shared part's use and what the clients use
// of their connections' rooms (a release goes back to the room first, so which part
// a charge ends up in may shift, not their sum).
func (s *Server) charged() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.budget.used.Load()
	for _, a := range s.clients {
		a.rmu.Lock()
		n += a.roomUsed
		a.rmu.Unlock()
	}
	return n
}
