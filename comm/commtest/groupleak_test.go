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
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// TestGroupOfAnEndedGoroutineIsNotInherited checks that a goroutine that
// opens a group and returns without closing it (an error path) leaves nothing that
// another goroutine can see. The runtime reuses the records of ended goroutines, so
// many later goroutines, each running one rank's blocking AllReduce, must all really
// reduce (not return nil with the buffer unreduced because a group they never opened
// deferred their call), and Sync must not fail with "group open".
func TestGroupOfAnEndedGoroutineIsNotInherited(t *testing.T) {
	const n, count = 2, 16
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
		nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	bs := c.Backends()
	for r := range n { // the goroutine that leaves its group open, on every rank
		done := make(chan error)
		go func() { done <- bs[r].GroupStart() }()
		require.NoError(t, <-done)
	}
	bufs := make([]comm.DevicePtr, n)
	for r := range n {
		bufs[r], err = c.Alloc(r, 4*count)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for round := range 64 {
		for r := range n {
			v := make([]float64, count)
			for i := range v {
				v[i] = float64(r + 1)
			}
			data, err := commtest.EncodeValues(comm.Float32, v)
			require.NoError(t, err)
			require.NoError(t, c.Write(r, bufs[r], data))
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { errs[r] = bs[r].AllReduce(bufs[r], 4*count) })
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "round %d rank %d", round, r)
			data, err := c.Read(r, bufs[r], 4*count)
			require.NoError(t, err)
			got, err := commtest.DecodeValues(comm.Float32, data)
			require.NoError(t, err)
			for i, x := range got {
				require.Equal(t, float64(n*(n+1)/2), x, "round %d rank %d element %d: the all-reduce did not run", round, r, i)
			}
		}
		for r := range n {
			comms := c.Communicators()
			done := make(chan error)
			go func() { done <- comms[r].Sync(ctx) }()
			require.NoError(t, <-done, "round %d rank %d", round, r)
		}
	}
}

// TestInGroupSubmitsOrDiscards checks comm.InGroup on NCCL backends: a function that
// succeeds has its two all-reduces submitted together and both results exist when
// InGroup returns; one that fails has its all-reduce discarded (the buffer unchanged,
// nothing left open), and the next all-reduce outside a group reduces normally.
func TestInGroupSubmitsOrDiscards(t *testing.T) {
	const n, count = 2, 8
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
		nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	bs := c.Backends()
	a, b := make([]comm.DevicePtr, n), make([]comm.DevicePtr, n)
	fill := func() {
		for r := range n {
			for _, p := range []*comm.DevicePtr{&a[r], &b[r]} {
				if *p == 0 {
					*p, err = c.Alloc(r, 4*count)
					require.NoError(t, err)
				}
				v := make([]float64, count)
				for i := range v {
					v[i] = float64(r + 1)
				}
				require.NoError(t, c.WriteValues(r, *p, comm.Float32, v))
			}
		}
	}
	check := func(p []comm.DevicePtr, want float64, what string) {
		for r := range n {
			want := want
			if want < 0 { // unchanged: the rank's own value
				want = float64(r + 1)
			}
			got, err := c.ReadValues(r, p[r], comm.Float32, count)
			require.NoError(t, err)
			for i := range got {
				require.Equal(t, want, got[i], "%s: rank %d element %d", what, r, i)
			}
		}
	}
	onRanks := func(f func(r int) error) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { errs[r] = f(r) })
		}
		wg.Wait()
		return errs
	}
	fill()
	for r, err := range onRanks(func(r int) error {
		return comm.InGroup(bs[r], func() error {
			if err := bs[r].AllReduce(a[r], 4*count); err != nil {
				return err
			}
			return bs[r].AllReduce(b[r], 4*count)
		})
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	check(a, 3, "submitted group, first all-reduce")
	check(b, 3, "submitted group, second all-reduce")

	fill()
	boom := errors.New("boom")
	for r, err := range onRanks(func(r int) error {
		return comm.InGroup(bs[r], func() error {
			if err := bs[r].AllReduce(a[r], 4*count); err != nil {
				return err
			}
			return boom
		})
	}) {
		require.ErrorIs(t, err, boom, "rank %d", r)
	}
	check(a, -1, "discarded group (every rank's own value)")
	for r, err := range onRanks(func(r int) error { return bs[r].GroupEnd() }) {
		require.ErrorIs(t, err, comm.ErrGroupNotOpen, "rank %d: the discarded group left a level open", r)
	}
	for r, err := range onRanks(func(r int) error { return bs[r].AllReduce(b[r], 4*count) }) {
		require.NoError(t, err, "rank %d", r)
	}
	check(b, 3, "all-reduce after the discarded group")
}

// TestGroupValueCollectsOperationsOfSeveralBackends checks nccl.Group: all-reduces on
// the world's backend and on a split's, added from two goroutines one after the other,
// are launched by Submit (a goroutine's later all-reduce outside the group is not
// part of it), and both results exist once Submit returns; a discarded group leaves the
// buffers unchanged.
func TestGroupValueCollectsOperationsOfSeveralBackends(t *testing.T) {
	const n, count = 4, 8
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
		nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pairs, err := c.SplitBackends(ctx, func(r int) int { return r / 2 })
	require.NoError(t, err)
	defer func() {
		for _, b := range pairs {
			require.NoError(t, b.Close())
		}
	}()
	world := c.Backends()
	a, b := make([]comm.DevicePtr, n), make([]comm.DevicePtr, n)
	for r := range n {
		for _, p := range []*comm.DevicePtr{&a[r], &b[r]} {
			*p, err = c.Alloc(r, 4*count)
			require.NoError(t, err)
		}
	}
	fill := func() {
		for r := range n {
			for _, p := range []comm.DevicePtr{a[r], b[r]} {
				v := make([]float64, count)
				for i := range v {
					v[i] = float64(r + 1)
				}
				require.NoError(t, c.WriteValues(r, p, comm.Float32, v))
			}
		}
	}
	read := func(r int, p comm.DevicePtr) float64 {
		v, err := c.ReadValues(r, p, comm.Float32, count)
		require.NoError(t, err)
		return v[count-1]
	}
	for _, submit := range []bool{true, false} {
		fill()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				g := comm.NewGroup(world[r])
				added := make(chan error)
				go func() { added <- g.Add(func() error { return world[r].AllReduce(a[r], 4*count) }) }()
				if err := <-added; err != nil {
					errs[r] = err
					return
				}
				if err := g.Add(func() error { return pairs[r].AllReduce(b[r], 4*count) }); err != nil {
					errs[r] = err
					return
				}
				if submit {
					errs[r] = g.Submit()
				} else {
					errs[r] = g.Discard()
				}
			})
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "rank %d", r)
			if submit {
				assert.Equal(t, float64(1+2+3+4), read(r, a[r]), "rank %d: world all-reduce", r)
				assert.Equal(t, float64(r/2*4+3), read(r, b[r]), "rank %d: pair all-reduce", r)
			} else {
				assert.Equal(t, float64(r+1), read(r, a[r]), "rank %d: discarded", r)
				assert.Equal(t, float64(r+1), read(r, b[r]), "rank %d: discarded", r)
			}
		}
	}
}
