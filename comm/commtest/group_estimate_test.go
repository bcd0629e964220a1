package commtest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// blockingCluster is float32Cluster with blocking communicators, which
// ncclGroupSimulateEnd needs.
func blockingCluster(t *testing.T, n int, opts ...commtest.Option) (*commtest.Cluster, []*nccl.Backend) {
	t.Helper()
	return float32Cluster(t, n, append([]commtest.Option{commtest.WithCommOptions(nccl.WithBlocking(true))}, opts...)...)
}

// readRank reads the two float32 of p on rank r.
func readRank(t *testing.T, c *commtest.Cluster, r int, p comm.DevicePtr) []float64 {
	t.Helper()
	got, err := c.ReadValues(r, p, comm.Float32, 2)
	require.NoError(t, err)
	return got
}

// Estimate makes the group's calls inside ncclGroupStart … ncclGroupSimulateEnd and
// keeps them: nothing changes before Submit, a second Estimate gives the same time,
// and Submit then launches the same operations on every rank.
func TestGroupEstimateThenSubmitGivesTheResultsOnEveryRank(t *testing.T) {
	const n = 4
	c, bs := blockingCluster(t, n)
	in, out := rankBuffers(t, c), rankBuffers(t, c)
	est := make([]time.Duration, n)
	errs := eachRank(t, n, func(r int) error {
		g := nccl.NewGroup()
		if err := g.Add(func() error {
			if err := bs[r].AllReduce(in[r], 8); err != nil {
				return err
			}
			return bs[r].Broadcast(out[r], 8, 2)
		}); err != nil {
			return err
		}
		d, err := g.Estimate()
		if err != nil {
			return err
		}
		est[r] = d
		assert.Equal(t, []float64{float64(r + 1), float64(r + 1)}, readRank(t, c, r, in[r]), "rank %d: estimate launched nothing", r)
		again, err := g.Estimate()
		if err != nil {
			return err
		}
		assert.Equal(t, d, again, "rank %d: the group is estimated again, unchanged", r)
		return g.Submit()
	})
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Positive(t, est[r], "rank %d: an estimate", r)
		assert.Equal(t, []float64{10, 10}, readRank(t, c, r, in[r]), "rank %d: the all-reduce was launched by submit", r)
		assert.Equal(t, []float64{3, 3}, readRank(t, c, r, out[r]), "rank %d: the broadcast from rank 2 was launched by submit", r)
	}
	assert.Equal(t, est[0], est[n-1], "every rank estimates the same group alike")
}

// A larger operation is estimated longer (the simulator's tuner model).
func TestGroupEstimateGrowsWithTheBytes(t *testing.T) {
	c, bs := blockingCluster(t, 2)
	small, err := c.Alloc(0, 8)
	require.NoError(t, err)
	large, err := c.Alloc(0, 8<<20)
	require.NoError(t, err)
	estimate := func(p comm.DevicePtr, bytes int) time.Duration {
		g := nccl.NewGroup()
		require.NoError(t, g.Add(func() error { return bs[0].AllReduce(p, bytes) }))
		d, err := g.Estimate()
		require.NoError(t, err)
		require.NoError(t, g.Discard())
		return d
	}
	s, l := estimate(small, 8), estimate(large, 8<<20)
	assert.Greater(t, l, s, "8 MiB takes longer than 8 bytes")
}

// Estimate alone launches nothing: a rank whose peer never submits does not wait for
// it, and the sequence of operations is unchanged (the next all-reduce of both ranks
// meets and sums).
func TestGroupEstimateAloneLaunchesNothing(t *testing.T) {
	c, bs := blockingCluster(t, 2)
	in := rankBuffers(t, c)
	g := nccl.NewGroup()
	require.NoError(t, g.Add(func() error { return bs[0].AllReduce(in[0], 8) }))
	d, err := g.Estimate() // rank 1 never takes part
	require.NoError(t, err)
	assert.Positive(t, d)
	require.NoError(t, g.Discard())
	assert.Equal(t, []float64{1, 1}, readRank(t, c, 0, in[0]), "nothing was launched")
	errs := eachRank(t, 2, func(r int) error { return bs[r].AllReduce(in[r], 8) })
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, []float64{3, 3}, readRank(t, c, r, in[r]), "rank %d: the next all-reduce pairs up", r)
	}
}

// An empty, discarded or submitted group has nothing to estimate; a group whose Add
// failed can only be discarded.
func TestGroupEstimateOfEmptyDiscardedSubmittedAndFailedGroups(t *testing.T) {
	c, bs := blockingCluster(t, 1)
	in := rankBuffers(t, c)
	g := nccl.NewGroup()
	d, err := g.Estimate()
	require.NoError(t, err)
	assert.Zero(t, d, "empty")

	require.NoError(t, g.Add(func() error { return bs[0].AllReduce(in[0], 8) }))
	require.NoError(t, g.Discard())
	d, err = g.Estimate()
	require.NoError(t, err)
	assert.Zero(t, d, "discarded")

	require.NoError(t, g.Add(func() error { return bs[0].AllReduce(in[0], 8) }))
	require.NoError(t, g.Submit())
	d, err = g.Estimate()
	require.NoError(t, err)
	assert.Zero(t, d, "submitted")

	failed := errors.New("layer failed")
	require.ErrorIs(t, g.Add(func() error { return failed }), failed)
	_, err = g.Estimate()
	require.ErrorIs(t, err, failed, "a failed add: estimate says so")
	require.ErrorIs(t, g.Submit(), failed, "and the group is still discarded by submit")
}

// Estimate needs NCCL 2.22.3 and blocking communicators (NCCL launches a non-blocking
// group from ncclGroupSimulateEnd); refused, the group is kept and Submit launches it.
func TestGroupEstimateIsRefusedWhereNCCLWouldLaunch(t *testing.T) {
	for name, opts := range map[string][]commtest.Option{
		"nccl-2.18":    {commtest.WithNCCLVersion(21803), commtest.WithCommOptions(nccl.WithBlocking(true))},
		"non-blocking": nil,
	} {
		t.Run(name, func(t *testing.T) {
			c, bs := float32Cluster(t, 2, opts...)
			in := rankBuffers(t, c)
			ests := make([]error, 2)
			errs := eachRank(t, 2, func(r int) error {
				g := nccl.NewGroup()
				if err := g.Add(func() error { return bs[r].AllReduce(in[r], 8) }); err != nil {
					return err
				}
				_, ests[r] = g.Estimate()
				return g.Submit()
			})
			for r := range 2 {
				require.ErrorIs(t, ests[r], comm.ErrUnsupported, "rank %d", r)
				if name == "nccl-2.18" {
					assert.ErrorContains(t, ests[r], "needs NCCL 2.22.3 (loaded 2.18.3)")
				} else {
					assert.ErrorContains(t, ests[r], "WithBlocking(true)")
				}
				require.NoError(t, errs[r], "rank %d", r)
				assert.Equal(t, []float64{3, 3}, readRank(t, c, r, in[r]), "rank %d: submit launched the kept group", r)
			}
		})
	}
}

// The zero Group estimates nothing; a nil *Group is an error, never a panic.
func TestGroupEstimateOfZeroAndNilGroups(t *testing.T) {
	var g nccl.Group
	d, err := g.Estimate()
	require.NoError(t, err)
	assert.Zero(t, d)
	var nilGroup *nccl.Group
	_, err = nilGroup.Estimate()
	require.ErrorIs(t, err, comm.ErrNullPointer)
}

// NCCL's failure of a recorded call during Estimate names the operation, as Submit's
// does, and leaves the communicator unhealthy when fatal (as a failed Submit does).
func TestGroupEstimateNamesTheOperationNCCLFailed(t *testing.T) {
	c, bs := blockingCluster(t, 1)
	in := rankBuffers(t, c)
	g := nccl.NewGroup()
	require.NoError(t, g.Add(func() error { return bs[0].AllReduce(in[0], 8) }))
	require.NoError(t, c.FailCall(0, "ncclAllReduce", 1))
	_, err := g.Estimate()
	var oe *comm.OpError
	require.ErrorAs(t, err, &oe)
	require.ErrorAs(t, oe.Err, &oe, "the operation's own error inside the group's")
	assert.Equal(t, "all-reduce", oe.Op)
	assert.ErrorIs(t, err, nccl.SystemError)
	assert.False(t, bs[0].IsHealthy(), "a fatal result poisons the communicator")
	require.NoError(t, g.Discard())
}
