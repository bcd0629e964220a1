package commtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/internal/nettest"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// connectScalable brings up every rank of a job on devs with job.Connect and
// WithScalableInit(ids), concurrently.
func connectScalable(ctx context.Context, t *testing.T, devs *commtest.Cluster, ids int) ([]*nccl.Backend, []error) {
	t.Helper()
	port, release, err := nettest.Reserve()
	require.NoError(t, err)
	defer release()
	bs := make([]*nccl.Backend, devs.Size())
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r := range bs {
		dev, err := devs.DeviceOption(r)
		require.NoError(t, err)
		cfg := rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: port, Rank: r, WorldSize: len(bs), LocalRank: r}
		wg.Go(func() {
			bs[r], errs[r] = job.Connect(ctx, job.WithJob(cfg), job.WithScalableInit(ids),
				job.WithLogger(quietLog), job.WithNCCL(dev, nccl.WithElementType(comm.BFloat16)))
		})
	}
	wg.Wait()
	return bs, errs
}

// A job brought up with WithScalableInit(3) on 7 ranks initialises every rank with
// ncclCommInitRankScalable from the 3 ids that ranks 0, 3 and 5 made (the roots NCCL's
// documentation gives for 3 ids on 7 ranks), and works; a reconnect then meets with
// rank 0's id alone.
func TestJobBringsUpWithScalableInit(t *testing.T) {
	devs, err := commtest.NewDevices(7)
	require.NoError(t, err)
	defer devs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	bs, errs := connectScalable(ctx, t, devs, 3)
	defer func() {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
	}()
	require.NoError(t, errors.Join(errs...))
	j := &simJob{devs: devs}
	require.NoError(t, j.sumOnEach(bs, []int{0, 1, 2, 3, 4, 5, 6}))
	calls := func(r int, call string) int64 {
		n, err := devs.Calls(r, call)
		require.NoError(t, err)
		return n
	}
	for r := range bs {
		root := r == 0 || r == 3 || r == 5
		assert.Equal(t, map[bool]int64{true: 1, false: 0}[root], calls(r, "ncclGetUniqueId"), "rank %d made an id", r)
		assert.Equal(t, int64(1), calls(r, "ncclCommInitRankScalable"), "rank %d", r)
		assert.Zero(t, calls(r, "ncclCommInitRankConfig"), "rank %d", r)
	}

	for r, err := range onEachRank(bs, func(_ int, b *nccl.Backend) error { return b.AttemptReconnect(ctx) }) {
		require.NoError(t, err, "reconnect rank %d", r)
	}
	require.NoError(t, j.sumOnEach(bs, []int{0, 1, 2, 3, 4, 5, 6}))
	for r := range bs {
		want := map[bool]int64{true: 2, false: 0}[r == 0]
		if r == 3 || r == 5 {
			want = 1
		}
		assert.Equal(t, want, calls(r, "ncclGetUniqueId"), "rank %d: only rank 0 makes the reconnect's id", r)
		assert.Equal(t, int64(1), calls(r, "ncclCommInitRankConfig"), "rank %d reconnected from one id", r)
	}
}

// Scalable bring-up on an NCCL older than 2.23.4 fails on every rank with
// ErrUnsupported naming the version; a number of ids outside 1..world is refused
// before anything starts.
func TestJobScalableInitNeedsNCCL2234AndSaneIDs(t *testing.T) {
	devs, err := commtest.NewDevices(2, commtest.WithNCCLVersion(22203))
	require.NoError(t, err)
	defer devs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	bs, errs := connectScalable(ctx, t, devs, 2)
	for r, err := range errs {
		require.ErrorIs(t, err, comm.ErrUnsupported, "rank %d", r)
		assert.Contains(t, err.Error(), "needs NCCL 2.23.4", "rank %d", r)
		assert.Nil(t, bs[r])
	}

	for _, ids := range []int{0, -1, 3} {
		cfg := rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: 1, Rank: 0, WorldSize: 2, LocalRank: 0}
		_, err := job.JoinJob(ctx, job.WithJob(cfg), job.WithScalableInit(ids))
		require.ErrorIs(t, err, comm.ErrInvalidSize, "%d ids", ids)
		assert.Contains(t, err.Error(), "scalable init ids", "%d ids", ids)
	}
}
