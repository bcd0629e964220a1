package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

func TestBackendAndBackendsReturnTheSameValues(t *testing.T) {
	c := newCluster(t, 3)
	bs := c.Backends()
	require.Len(t, bs, 3)
	for r, want := range bs {
		got, err := c.Backend(r)
		require.NoError(t, err)
		assert.Same(t, want, got, "rank %d", r)
		n, err := c.NCCL(r)
		require.NoError(t, err)
		assert.Same(t, want, n, "rank %d: NCCL gives the same backend", r)
		assert.Equal(t, r, got.Rank())
	}
}

var errRank = errors.New("rank failed on purpose")

func TestRunRanksAttributesEachErrorToItsRank(t *testing.T) {
	c := newCluster(t, 4, fast)
	p := make([]comm.DevicePtr, 4)
	for r := range 4 {
		var err error
		p[r], err = c.Alloc(r, 8)
		require.NoError(t, err)
	}
	// Every rank reduces; then ranks 1 and 3 fail, each its own way.
	err := commtest.RunRanks(context.Background(), c.Backends(), func(_ context.Context, r int, b comm.Backend) error {
		if err := b.AllReduce(p[r], 8); err != nil {
			return err
		}
		switch r {
		case 1:
			return fmt.Errorf("step %d: %w", r*10, errRank)
		case 3:
			return b.AllReduce(p[r], 3) // not a multiple of the element size
		}
		return nil
	})
	require.Error(t, err)
	var re *commtest.RanksError
	require.ErrorAs(t, err, &re)
	assert.Empty(t, re.Running)
	assert.NoError(t, re.Cause)
	require.Len(t, re.Errs, 4)
	assert.NoError(t, re.Errs[0])
	assert.ErrorIs(t, re.Errs[1], errRank)
	assert.NoError(t, re.Errs[2])
	assert.ErrorIs(t, re.Errs[3], comm.ErrInvalidSize)
	assert.ErrorIs(t, err, errRank, "errors.Is sees every rank's error")
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	assert.Equal(t, "rank 1: step 10: rank failed on purpose; rank 3: "+re.Errs[3].Error(), err.Error())

	assert.NoError(t, commtest.RunRanks(context.Background(), c.Backends(), func(_ context.Context, r int, b comm.Backend) error {
		return b.AllReduce(p[r], 8)
	}), "every rank succeeds: nil")
}

// A rank that waits in a collective its peers never join is named when the context
// ends; the ranks that returned are not, and their errors stay attributed.
func TestRunRanksNamesTheRanksStillRunningWhenTheContextEnds(t *testing.T) {
	c := newCluster(t, 3) // the default operation timeout (minutes) outlasts the test
	p, err := c.Alloc(1, 8)
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var others sync.WaitGroup
	others.Add(2)
	stuck := errors.New("ranks 0 and 2 are done")
	// The deadline, once only rank 1 is left: ranks 0 and 2 call Done just before they
	// return, so give RunRanks a moment to see them return.
	go func() { others.Wait(); time.Sleep(200 * time.Millisecond); cancel(stuck) }()
	err = commtest.RunRanks(ctx, c.Backends(), func(_ context.Context, r int, b comm.Backend) error {
		if r == 1 {
			return b.AllReduce(p, 8) // its peers never join
		}
		defer others.Done()
		if r == 2 {
			return errRank
		}
		return nil
	})
	var re *commtest.RanksError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, []int{1}, re.Running)
	assert.ErrorIs(t, err, stuck, "the context's cause")
	assert.ErrorIs(t, re.Errs[2], errRank)
	assert.NoError(t, re.Errs[0])
	assert.NoError(t, re.Errs[1], "rank 1 has not returned")
	assert.Equal(t, "ranks [1] still running: ranks 0 and 2 are done; rank 2: rank failed on purpose", err.Error())
	require.NoError(t, c.Kill(1)) // ends rank 1's wait; the cluster's cleanup closes it
}

func TestRunRanksWithNoRanksReturnsNil(t *testing.T) {
	assert.NoError(t, commtest.RunRanks(context.Background(), []comm.Backend(nil), func(context.Context, int, comm.Backend) error {
		return errRank
	}))
}

// A rank that panics is that rank's error (the test binary keeps running), and the
// first failure cancels the other ranks' context at once (they do not wait out theirs).
func TestRunRanksRecoversAPanicAndCancelsTheOthers(t *testing.T) {
	c, err := commtest.NewCluster(3, commtest.WithCommOptions(nccl.WithElementType(comm.Float32)))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = commtest.RunRanks(ctx, c.NCCLs(), func(ctx context.Context, r int, b *nccl.Backend) error {
		if r == 1 {
			panic("rank 1 broke")
		}
		<-ctx.Done() // a wait for the failed rank
		return context.Cause(ctx)
	})
	var re *commtest.RanksError
	require.ErrorAs(t, err, &re)
	assert.ErrorIs(t, re.Errs[1], commtest.ErrRankPanicked)
	assert.Contains(t, re.Errs[1].Error(), "rank 1 broke")
	assert.Empty(t, re.Running, "the others returned once canceled")
	assert.ErrorContains(t, re.Errs[0], "rank 1 failed")
	assert.Less(t, time.Since(start), 30*time.Second, "not ended by the test's own deadline")
}
