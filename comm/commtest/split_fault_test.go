package commtest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// A member that never takes part in a Split's exchange (slow, then dead) fails the
// Split on every rank, and the survivors can still Shrink the parent and use the
// result: nothing was freed under work still queued on the child.
func TestSplitWithALostPeerFailsAndSurvivorsShrink(t *testing.T) {
	const n, victim = 4, 3
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
		nccl.WithTimeout(300*time.Millisecond), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer c.Close()
	bs := make([]*nccl.Backend, n)
	for r := range bs {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
	}
	require.NoError(t, c.Delay(victim, time.Hour)) // rank 3's operations start an hour late
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	children := make([]*nccl.Backend, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { children[r], errs[r] = b.Split(ctx, 0, r) })
	}
	wg.Wait()
	for r := range n {
		assert.Error(t, errs[r], "rank %d: a Split whose exchange failed fails", r)
		if children[r] != nil {
			assert.NoError(t, children[r].Close())
		}
	}
	require.NoError(t, c.Kill(victim))
	shrunk := make([]*nccl.Backend, n)
	for r := range victim {
		wg.Go(func() { shrunk[r], errs[r] = bs[r].Shrink(ctx, []int{victim}) })
	}
	wg.Wait()
	for r := range victim {
		require.NoError(t, errs[r], "rank %d: shrink", r)
	}
	for r := range victim {
		wg.Go(func() {
			p, err := shrunk[r].SymmetricAlloc(4)
			if err == nil {
				err = shrunk[r].AllReduce(p, 4)
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r := range victim {
		assert.NoError(t, errs[r], "rank %d: all-reduce after shrink", r)
		assert.NoError(t, shrunk[r].Close())
	}
}
