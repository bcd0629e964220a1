package nccl_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

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

// The exchange that learns a child's members is one all-gather on the child, made
// only while the recorder is on.
func TestFlightRecorderSplitExchangesOnlyWhenOn(t *testing.T) {
	for _, tt := range []struct {
		entries int
		gathers int64
	}{{0, 0}, {16, 1}} {
		c, bs := splitCluster(t, 2, tt.entries)
		splitAll(t, bs, func(int) int { return 0 }, func(r int) int { return r })
		for r := range bs {
			n, err := c.Calls(r, "ncclAllGather")
			require.NoError(t, err)
			assert.Equal(t, tt.gathers, n, "entries %d rank %d", tt.entries, r)
		}
	}
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
