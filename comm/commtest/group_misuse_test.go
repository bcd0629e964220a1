package commtest_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// float32Cluster is a cluster of n float32 ranks, closed with the test, with its
// backends as their concrete type.
func float32Cluster(t *testing.T, n int, opts ...commtest.Option) (*commtest.Cluster, []*nccl.Backend) {
	t.Helper()
	c, err := commtest.NewCluster(n, append([]commtest.Option{commtest.WithCommOptions(
		nccl.WithElementType(comm.Float32), nccl.WithLogger(quietLog))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bs := make([]*nccl.Backend, n)
	for r := range bs {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
	}
	return c, bs
}

// rankBuffers gives every rank a buffer of two float32 holding rank+1.
func rankBuffers(t *testing.T, c *commtest.Cluster) []comm.DevicePtr {
	t.Helper()
	ps := make([]comm.DevicePtr, c.Size())
	for r := range ps {
		var err error
		ps[r], err = c.Alloc(r, 8)
		require.NoError(t, err)
		require.NoError(t, c.WriteValues(r, ps[r], comm.Float32, []float64{float64(r + 1), float64(r + 1)}))
	}
	return ps
}

// eachRank runs f on every rank at once and returns their errors by rank; a rank that
// has not returned within a minute fails the test (a hang).
func eachRank(t *testing.T, n int, f func(r int) error) []error {
	t.Helper()
	errs := make([]error, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { errs[r] = f(r) })
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a rank hangs")
	}
	return errs
}

// A panic inside Add discards the group and takes the goroutine out of it: the next
// blocking all-reduce of that goroutine is made and waited for, and Submit launches
// nothing that was recorded before the panic.
func TestGroupAddPanicDiscardsTheGroup(t *testing.T) {
	c, bs := float32Cluster(t, 2)
	in, out := rankBuffers(t, c), rankBuffers(t, c)
	errs := eachRank(t, 2, func(r int) error {
		g := nccl.NewGroup()
		func() {
			defer func() { assert.Equal(t, "boom", recover(), "rank %d: the panic continues", r) }()
			_ = g.Add(func() error {
				_ = bs[r].AllReduce(in[r], 8)
				panic("boom")
			})
		}()
		if err := bs[r].AllReduce(out[r], 8); err != nil {
			return err
		}
		err := g.Submit()
		assert.Error(t, err, "rank %d: submit after a panic in add says the group was discarded", r)
		return nil
	})
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d", r)
		got, err := c.ReadValues(r, out[r], comm.Float32, 2)
		require.NoError(t, err)
		assert.Equal(t, []float64{3, 3}, got, "rank %d: the all-reduce after the panic was made", r)
		got, err = c.ReadValues(r, in[r], comm.Float32, 2)
		require.NoError(t, err)
		assert.Equal(t, []float64{float64(r + 1), float64(r + 1)}, got, "rank %d: the discarded all-reduce never ran", r)
	}
}

// InGroup inside Add that discards (its function failed) discards the Group: Add and
// Submit say so, and the all-reduce is never launched.
func TestInGroupInsideGroupAddDiscardsTheGroup(t *testing.T) {
	c, bs := float32Cluster(t, 2)
	in := rankBuffers(t, c)
	failed := errors.New("layer failed")
	addErrs := make([]error, 2)
	errs := eachRank(t, 2, func(r int) error {
		g := nccl.NewGroup()
		addErrs[r] = g.Add(func() error {
			err := comm.InGroup(bs[r], func() error {
				_ = bs[r].AllReduce(in[r], 8)
				return failed
			})
			assert.ErrorIs(t, err, failed)
			return nil // the engine handled it
		})
		return g.Submit()
	})
	for r := range 2 {
		assert.Error(t, addErrs[r], "rank %d: add says the group was discarded", r)
		assert.Error(t, errs[r], "rank %d: submit of a discarded group fails", r)
		got, err := c.ReadValues(r, in[r], comm.Float32, 2)
		require.NoError(t, err)
		assert.Equal(t, []float64{float64(r + 1), float64(r + 1)}, got, "rank %d: nothing was launched", r)
	}
}

// A Group's own Add, Submit or Discard called from inside its Add is an error
// (ErrGroupOpen), not a deadlock.
func TestGroupMethodsInsideItsOwnAddAreRefused(t *testing.T) {
	c, bs := float32Cluster(t, 1)
	p := rankBuffers(t, c)[0]
	g := nccl.NewGroup()
	for name, inner := range map[string]func() error{
		"add":     func() error { return g.Add(func() error { return nil }) },
		"submit":  g.Submit,
		"discard": g.Discard,
	} {
		errs := eachRank(t, 1, func(int) error {
			return g.Add(func() error {
				if err := bs[0].AllReduce(p, 8); err != nil {
					return err
				}
				return inner()
			})
		})
		assert.ErrorIs(t, errs[0], comm.ErrGroupOpen, name)
		require.NoError(t, g.Discard(), name)
	}
}

// One Group cannot hold operations of two clusters (two NCCL worlds): the second's
// operation is refused at the call, and the first's is launched alone.
func TestGroupRefusesOperationsOfTwoWorlds(t *testing.T) {
	c1, b1 := float32Cluster(t, 1)
	c2, b2 := float32Cluster(t, 1)
	p1, p2 := rankBuffers(t, c1)[0], rankBuffers(t, c2)[0]
	g := nccl.NewGroup()
	var second error
	require.NoError(t, g.Add(func() error {
		require.NoError(t, b1[0].AllReduce(p1, 8))
		second = b2[0].AllReduce(p2, 8)
		return nil
	}))
	assert.ErrorIs(t, second, comm.ErrUnsupported)
	require.NoError(t, g.Submit())
	got, err := c1.ReadValues(0, p1, comm.Float32, 2)
	require.NoError(t, err)
	assert.Equal(t, []float64{1, 1}, got)
	// the second world still works on its own
	require.NoError(t, b2[0].AllReduce(p2, 8))
}

// Validate of a backend comm made, with an element type other than the backend's, is
// ErrInvalidType: the option is never dropped (bf16 data would be summed as float32).
func TestValidateRefusesAConflictingElementType(t *testing.T) {
	_, bs := float32Cluster(t, 1)
	_, err := comm.Validate(bs[0], comm.WithElementType(comm.BFloat16))
	assert.ErrorIs(t, err, comm.ErrInvalidType)
	v, err := comm.Validate(bs[0], comm.WithElementType(comm.Float32))
	require.NoError(t, err)
	assert.Same(t, bs[0], v, "the same element type: the backend itself")
}

// An engine injects and matches NCCL results through comm/nccl alone (no raw/nccl).
func TestEnginesMatchNCCLResultsThroughCommNCCL(t *testing.T) {
	c, bs := float32Cluster(t, 1)
	p := rankBuffers(t, c)[0]
	require.NoError(t, c.InjectAsyncError(0, nccl.RemoteError))
	err := bs[0].AllReduce(p, 8)
	assert.ErrorIs(t, err, nccl.RemoteError)
	assert.NotErrorIs(t, err, nccl.SystemError)
}
