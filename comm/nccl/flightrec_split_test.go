package nccl_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// splitCluster is a simulated job of n ranks whose backends record (entries 0: off).
func splitCluster(t *testing.T, n, entries int) (*commtest.Cluster, []*nccl.Backend) {
	t.Helper()
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithFlightRecorder(entries)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bs := make([]*nccl.Backend, n)
	for r := range n {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
	}
	return c, bs
}

// splitAll splits every backend at once, rank r with color(r) and key(r), and returns
// the children by parent rank (nil for a negative color); they close with the test.
func splitAll(t *testing.T, bs []*nccl.Backend, color, key func(r int) int) []*nccl.Backend {
	t.Helper()
	out := make([]*nccl.Backend, len(bs))
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { out[r], errs[r] = b.Split(context.Background(), color(r), key(r)) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		if out[r] != nil {
			t.Cleanup(func() { _ = out[r].Close() })
		}
	}
	return out
}

// groupsOf reads what rank's recorder holds now.
func groupsOf(t *testing.T, b *nccl.Backend) map[string]flightrec.GroupConfig {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, b.FlightRecorder().Dump(&buf))
	tr, err := flightrec.ReadTrace(&buf)
	require.NoError(t, err)
	return tr.Groups
}

// Split children are recorded: a name alike on every member, told apart from the
// siblings by color and from earlier splits by the count of splits (which ranks
// without a child count too), and the members' global ranks in child-rank order
// (here reversed by the keys).
func TestFlightRecorderRecordsSplitChildren(t *testing.T) {
	_, bs := splitCluster(t, 4, 16)
	parity := splitAll(t, bs, func(r int) int { return r % 2 }, func(r int) int { return -r })
	three := splitAll(t, bs, func(r int) int { return map[bool]int{true: 0, false: -1}[r < 3] }, func(r int) int { return r })
	all := splitAll(t, bs, func(int) int { return 7 }, func(r int) int { return r })
	require.Nil(t, three[3])
	require.NotNil(t, parity[0])

	want := map[int]map[string][]int{
		0: {"0": {0, 1, 2, 3}, "0:split1:0": {2, 0}, "0:split2:0": {0, 1, 2}, "0:split3:7": {0, 1, 2, 3}},
		1: {"0": {0, 1, 2, 3}, "0:split1:1": {3, 1}, "0:split2:0": {0, 1, 2}, "0:split3:7": {0, 1, 2, 3}},
		2: {"0": {0, 1, 2, 3}, "0:split1:0": {2, 0}, "0:split2:0": {0, 1, 2}, "0:split3:7": {0, 1, 2, 3}},
		3: {"0": {0, 1, 2, 3}, "0:split1:1": {3, 1}, "0:split3:7": {0, 1, 2, 3}},
	}
	for r, b := range bs {
		got := map[string][]int{}
		for name, g := range groupsOf(t, b) {
			got[name] = g.Ranks
			if name != "0" {
				assert.Equal(t, "split", g.Desc, "rank %d %s", r, name)
			}
		}
		assert.Equal(t, want[r], got, "rank %d", r)
		assert.Same(t, b.FlightRecorder(), all[r].FlightRecorder(), "rank %d: the child shares its parent's recorder", r)
	}
}

// The exchange that learns a child's members is one all-gather on the child, made on
// every rank whether it records or not.
func TestFlightRecorderSplitExchangesOnEveryRank(t *testing.T) {
	for _, entries := range []int{0, 16} {
		c, bs := splitCluster(t, 2, entries)
		splitAll(t, bs, func(int) int { return 0 }, func(r int) int { return r })
		for r := range bs {
			n, err := c.Calls(r, "ncclAllGather")
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "entries %d rank %d", entries, r)
		}
	}
}

// Ranks configured apart, rank 0 recording and the others not, split and use the
// children: every rank makes the same calls on a child, so its first collective is
// the same on all of them (an exchange made only where the recorder is on met the
// other ranks' all-reduce and hung until the timeout), and rank 0 records the child.
func TestFlightRecorderSplitWithRanksConfiguredApart(t *testing.T) {
	c, err := commtest.NewCluster(4,
		commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithTimeout(20*time.Second), nccl.WithFlightRecorder(0)),
		commtest.WithRankCommOptions(func(rank int) []nccl.Option {
			if rank == 0 {
				return []nccl.Option{nccl.WithFlightRecorder(16)}
			}
			return nil
		}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bs := make([]*nccl.Backend, 4)
	for r := range bs {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
	}
	require.NotNil(t, bs[0].FlightRecorder())
	require.Nil(t, bs[1].FlightRecorder())
	kids := splitAll(t, bs, func(r int) int { return r % 2 }, func(r int) int { return r })
	var wg sync.WaitGroup
	errs := make([]error, len(kids))
	bufs := make([]comm.DevicePtr, len(kids))
	for r, k := range kids {
		bufs[r], err = c.Alloc(r, 16)
		require.NoError(t, err)
		require.NoError(t, c.WriteValues(r, bufs[r], comm.Float32, []float64{float64(r + 1), float64(r + 1), float64(r + 1), float64(r + 1)}))
		wg.Go(func() { errs[r] = k.AllReduce(bufs[r], 16) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		got, err := c.ReadValues(r, bufs[r], comm.Float32, 4)
		require.NoError(t, err)
		// ranks 0 and 2 sum 1+3, ranks 1 and 3 sum 2+4
		assert.Equal(t, []float64{float64(4 + 2*(r%2)), float64(4 + 2*(r%2)), float64(4 + 2*(r%2)), float64(4 + 2*(r%2))}, got, "rank %d", r)
	}
	assert.Equal(t, []int{0, 2}, groupsOf(t, bs[0])["0:split1:0"].Ranks)
}

// A member whose part of the exchange fails (its host copy) still takes part, so that
// nobody waits: every member of that child leaves it unrecorded, the sibling is
// recorded, and the Split and the child work.
func TestFlightRecorderSplitExchangeFailureLeavesTheChildUnrecorded(t *testing.T) {
	c, bs := splitCluster(t, 4, 16)
	require.NoError(t, c.FailCall(1, "cuMemcpyHtoDAsync_v2", 1))
	kids := splitAll(t, bs, func(r int) int { return r % 2 }, func(r int) int { return r })
	for r, b := range bs {
		_, odd := groupsOf(t, b)["0:split1:1"]
		_, even := groupsOf(t, b)["0:split1:0"]
		assert.False(t, odd, "rank %d recorded the child whose exchange failed", r)
		assert.Equal(t, r%2 == 0, even, "rank %d", r)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(kids))
	for r, k := range kids {
		p, err := c.Alloc(r, 64)
		require.NoError(t, err)
		wg.Go(func() { errs[r] = k.AllReduce(p, 64) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}
