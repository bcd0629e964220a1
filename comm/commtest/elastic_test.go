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

// onEachRank runs f on every backend at once and returns their errors.
func onEachRank(bs []*nccl.Backend, f func(r int, b *nccl.Backend) error) []error {
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { errs[r] = f(r, b) })
	}
	wg.Wait()
	return errs
}

func nccls(t *testing.T, c *commtest.Cluster) []*nccl.Backend {
	t.Helper()
	bs := make([]*nccl.Backend, c.Size())
	for r := range bs {
		b, err := c.NCCL(r)
		require.NoError(t, err)
		bs[r] = b
	}
	return bs
}

// returnsWithin fails the test when f does not return in a generous time: an
// operation on a suspended communicator must fail at once, never wait.
func returnsWithin(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the operation hangs")
		return nil
	}
}

func TestSuspendedCommunicatorFailsEveryOperationAtOnceUntilResume(t *testing.T) {
	c, err := commtest.NewCluster(3, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer c.Close()
	bs := nccls(t, c)
	ctx := context.Background()
	p, err := c.Alloc(0, 64)
	require.NoError(t, err)

	before, err := bs[0].MemStats()
	require.NoError(t, err)
	assert.False(t, before.Suspended)
	assert.Positive(t, before.Suspendable, "connection buffers to 2 peers")
	assert.Equal(t, before.Persistent+before.Suspendable, before.Total)

	for r, err := range onEachRank(bs, func(_ int, b *nccl.Backend) error { return b.Suspend(ctx) }) {
		require.NoError(t, err, "rank %d", r)
	}
	after, err := bs[0].MemStats()
	require.NoError(t, err)
	assert.True(t, after.Suspended, "the statistics show the release")
	assert.Equal(t, before.Total, after.Total, "NCCL keeps counting what it tracks")

	calls, err := c.Calls(0, "ncclAllReduce")
	require.NoError(t, err)
	for name, op := range map[string]func() error{
		"all-reduce": func() error { return bs[0].AllReduce(p, 64) },
		"broadcast":  func() error { return bs[0].Broadcast(p, 64, 1) },
		"barrier":    bs[0].Barrier,
		"send":       func() error { return bs[0].SendTo(p, 64, 1, 0) },
		"suspend":    func() error { return bs[0].Suspend(ctx) },
	} {
		err := returnsWithin(t, op)
		require.ErrorIs(t, err, nccl.ErrSuspended, name)
		assert.Contains(t, err.Error(), "rank 0", name)
	}
	after2, err := c.Calls(0, "ncclAllReduce")
	require.NoError(t, err)
	assert.Equal(t, calls, after2, "nothing reached NCCL")
	assert.True(t, bs[0].IsHealthy(), "suspended is not failed")

	for r, err := range onEachRank(bs, func(_ int, b *nccl.Backend) error { return b.Resume(ctx) }) {
		require.NoError(t, err, "rank %d", r)
	}
	resumed, err := bs[0].MemStats()
	require.NoError(t, err)
	assert.False(t, resumed.Suspended)
	assert.ErrorContains(t, bs[0].Resume(ctx), "not suspended")
	for r, err := range onEachRank(bs, func(r int, b *nccl.Backend) error {
		q, err := c.Alloc(r, 4)
		if err == nil {
			err = c.WriteValues(r, q, comm.Float32, []float64{float64(r + 1)})
		}
		if err == nil {
			err = b.AllReduce(q, 4)
		}
		if err != nil {
			return err
		}
		v, err := c.ReadValues(r, q, comm.Float32, 1)
		if err == nil && v[0] != 6 {
			err = fmt.Errorf("sum %v, want 6", v[0])
		}
		return err
	}) {
		require.NoError(t, err, "rank %d after resume", r)
	}
}

func TestElasticCallsNeedTheirNCCLVersion(t *testing.T) {
	tests := []struct {
		version           int
		grow, suspendNeed string // "" when the version has it
	}{
		{21803, "2.29.2", "2.29.7"},
		{22203, "2.29.2", "2.29.7"},
		{22903, "", "2.29.7"},
		{22907, "", ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.version), func(t *testing.T) {
			c, err := commtest.NewCluster(2, commtest.WithNCCLVersion(tt.version),
				commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog)))
			require.NoError(t, err)
			defer c.Close()
			bs := nccls(t, c)
			ctx := context.Background()
			check := func(err error, need string) {
				t.Helper()
				if need == "" {
					assert.NotErrorIs(t, err, comm.ErrUnsupported)
					return
				}
				require.ErrorIs(t, err, comm.ErrUnsupported)
				assert.Contains(t, err.Error(), "needs NCCL "+need)
			}
			_, err = bs[0].MemStats()
			check(err, tt.suspendNeed)
			if tt.suspendNeed != "" {
				check(bs[0].Suspend(ctx), tt.suspendNeed)
				check(bs[0].Resume(ctx), tt.suspendNeed)
				n, err := c.Calls(0, "ncclCommSuspend")
				require.NoError(t, err)
				assert.Zero(t, n, "an older NCCL is never called")
			}
			_, err = bs[0].GrowID()
			check(err, tt.grow)
			if tt.grow != "" {
				_, err = bs[1].Grow(ctx, 3, nil)
				check(err, tt.grow)
				dev, err := c.DeviceOption(1)
				require.NoError(t, err)
				_, err = nccl.Join(ctx, comm.UniqueID{}, 1, 2, dev, nccl.WithElementType(comm.Float32))
				check(err, tt.grow)
			}
		})
	}
}

func TestGrowChecksItsArgumentsBeforeNCCL(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer c.Close()
	bs := nccls(t, c)
	ctx := context.Background()
	for _, world := range []int{-1, 0, 1, 2} {
		_, err := bs[0].Grow(ctx, world, nil)
		require.ErrorIs(t, err, comm.ErrInvalidSize, "world %d", world)
		assert.Contains(t, err.Error(), "more than the 2 ranks")
	}
	dev, err := c.DeviceOption(1)
	require.NoError(t, err)
	for _, tt := range []struct{ rank, world int }{{2, 2}, {-1, 3}, {0, 0}} {
		_, err := nccl.Join(ctx, comm.UniqueID{}, tt.rank, tt.world, dev, nccl.WithElementType(comm.Float32))
		require.Error(t, err, "rank %d of %d", tt.rank, tt.world)
	}
	_, err = nccl.Join(ctx, comm.UniqueID{}, 2, 3, dev)
	require.ErrorIs(t, err, comm.ErrInvalidType, "no element type")
	require.NoError(t, bs[0].GroupStart())
	_, err = bs[0].Grow(ctx, 3, nil)
	require.ErrorIs(t, err, comm.ErrGroupOpen)
	require.NoError(t, bs[0].GroupEnd())
	n, err := c.Calls(0, "ncclCommGrow")
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestGrowReportsTheLibrarysErrors(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer c.Close()
	bs := nccls(t, c)
	ctx := context.Background()
	id, err := bs[0].GrowID()
	require.NoError(t, err)
	_, err = bs[0].GrowID()
	require.Error(t, err, "an id serves one grow")
	assert.Contains(t, err.Error(), "not used up")

	// A newcomer with an id no communicator made fails instead of waiting.
	c2, err := commtest.NewDevices(1)
	require.NoError(t, err)
	defer c2.Close()
	dev, err := c2.DeviceOption(0)
	require.NoError(t, err)
	_, err = returnsWithinV(t, func() (*nccl.Backend, error) {
		return nccl.Join(ctx, id, 2, 3, dev, nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog))
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unique id unknown")

	// Ranks that disagree on the grown size fail together.
	errs := onEachRank(bs, func(r int, b *nccl.Backend) error {
		var root *comm.UniqueID
		if r == 0 {
			root = &id
		}
		nb, err := b.Grow(ctx, 3+r, root)
		if nb != nil {
			_ = nb.Close()
		}
		return err
	})
	for r, err := range errs {
		assert.Error(t, err, "rank %d", r) // the first to arrive learns it as an asynchronous error
	}
	assert.ErrorContains(t, errors.Join(errs...), "ranks disagree on the grown size: ")
	assert.True(t, bs[0].IsHealthy(), "a failed grow leaves the communicator")
}

func returnsWithinV[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := returnsWithin(t, func() error {
		var err error
		v, err = f()
		return err
	})
	return v, err
}

func TestSuspendedCommunicatorCloses(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer c.Close()
	bs := nccls(t, c)
	for r, err := range onEachRank(bs, func(_ int, b *nccl.Backend) error { return b.Suspend(context.Background()) }) {
		require.NoError(t, err, "rank %d", r)
	}
	for r, err := range onEachRank(bs, func(_ int, b *nccl.Backend) error { return b.Close() }) {
		require.NoError(t, err, "close on rank %d", r)
	}
	_, err = bs[0].MemStats()
	require.ErrorIs(t, err, comm.ErrClosed)
}
