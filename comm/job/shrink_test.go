package job

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Survivors of a job shrink, and the shrunk backends reconnect among themselves in a
// group of their own, with their new numbering, even after the old backends (which
// owned the job) are closed.
func TestShrunkJobBackendsReconnectAmongTheSurvivors(t *testing.T) {
	leaktest.Check(t)
	const world = 3
	port := freePort(t)
	fakes := map[int]idFake{0: newIDFake(), 1: newIDFake(), 2: newIDFake()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*nccl.Backend, error) {
		return Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(fakes[r]), quiet)
	})
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	require.NoError(t, bs[2].Close()) // rank 2 dies
	survivors := []int{0, 1}
	shrunk, errs := onRanks(survivors, func(r int) (*nccl.Backend, error) {
		fakes[r].SplitRank, fakes[r].SplitWorld = nccl.ShrunkRank(r, []int{2}), 2
		return bs[r].Shrink(ctx, []int{2})
	})
	for _, r := range survivors {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, bs[r].Close(), "rank %d", r)
	}
	_, errs = onRanks(survivors, func(r int) (struct{}, error) { return struct{}{}, shrunk[r].AttemptReconnect(ctx) })
	for _, r := range survivors {
		require.NoError(t, errs[r], "rank %d", r)
		m := memberOf(shrunk[r])
		assert.Equal(t, "default/shrink0", m.group)
		assert.Equal(t, uint64(1), m.generation())
		assert.Equal(t, r, m.rank)
		assert.Equal(t, 2, m.world)
		ids := fakes[r].initIDs()
		require.Len(t, ids, 2, "rank %d: the first communicator and the reconnected one", r)
		assert.Equal(t, fakes[0].initIDs()[1], ids[1], "rank %d", r)
	}
	closeAll(t, shrunk)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "the last backend of rank 0 closed the store")
	require.NoError(t, l.Close())
}
