//go:build cgo

package mpi_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// TestMPITypedSlicesAll runs, on 2 and 4 ranks, the typed slice forms of the rooted and
// all-to-all collectives (Reduce, Gather, Scatter, AllToAll, AllToAllv, BroadcastInto),
// the narrow floating formats' storage types (BFloat16, Float16, Float8E4M3,
// Float8E5M2) through AllReduce, a Split child used without a type assertion, and the
// error of an invalid reduction operator, which names MPI's operators.
func TestMPITypedSlicesAll(t *testing.T) {
	if inRank(t) {
		mpiRankTypedSlicesAll(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprint(np, "-ranks"), func(t *testing.T) { runMPI(t, np, "TestMPITypedSlicesAll") })
	}
}

func mpiRankTypedSlicesAll(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	typedCollectives(t, c)
	// No goroutine of the test waits for a P, so the calls are made directly; one that
	// samples a moment when the runtime's own goroutines (a GC worker, a timer) are
	// runnable may go to the progress thread, which is right, and rare.
	assert.LessOrEqual(t, mpi.Offloads(c), int64(2), "no goroutine waits for a P: (nearly) every call is made directly")

	// Again with goroutines waiting for a P: the calls run on the progress thread.
	func() {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		var stop atomic.Bool
		var wg sync.WaitGroup
		defer wg.Wait()
		defer stop.Store(true)
		for range 8 {
			wg.Go(func() {
				for !stop.Load() {
				}
			})
		}
		require.NoError(t, c.Barrier(ctx))
		require.NoError(t, c.Barrier(ctx))
		typedCollectives(t, c)
	}()
	assert.Greater(t, mpi.Offloads(c), int64(9), "calls made on the progress thread")
	r := c.Rank()

	// Split returns a *Communicator: typed calls take it directly.
	n := c.WorldSize()
	child, err := mpi.Split(ctx, c, r%2, r)
	require.NoError(t, err)
	require.NotNil(t, child)
	v := []int32{1}
	require.NoError(t, mpi.AllReduce(child, v, comm.Sum))
	assert.Equal(t, int32((n+1-r%2)/2), v[0], "members of the child")
	require.NoError(t, child.Close())
	none, err := mpi.Split(ctx, c, -1, r)
	require.NoError(t, err)
	assert.Nil(t, none, "a negative color joins no communicator")
	iface, err := c.Split(ctx, -1, r)
	require.NoError(t, err)
	assert.True(t, iface == nil, "the method returns an untyped nil interface")

	// An invalid reduction operator is described with MPI's operators.
	before := c.MPICalls()
	for _, op := range []comm.ReduceOp{5, 42} {
		err := mpi.AllReduce(c, []float32{1}, op)
		require.ErrorIs(t, err, comm.ErrInvalidOp, "op %d", op)
		assert.Contains(t, err.Error(), "MPI_SUM", "op %d", op)
		assert.NotContains(t, err.Error(), "reconnect", "op %d", op)
		assert.NotContains(t, err.Error(), "live pre-mul-sum", "op %d", op)
	}
	assert.Equal(t, before, c.MPICalls(), "invalid operators reached MPI")
	require.NoError(t, c.Barrier(ctx))
}

// typedCollectives runs every typed collective on c and checks the results.
func typedCollectives(t *testing.T, c *mpi.Communicator) {
	r, n := c.Rank(), c.WorldSize()
	root := n - 1

	// Reduce: recv on root only.
	var recv []int32
	if r == root {
		recv = make([]int32, 2)
	}
	require.NoError(t, mpi.Reduce(c, []int32{int32(r), 1}, recv, comm.Sum, root))
	if r == root {
		assert.Equal(t, []int32{int32(n * (n - 1) / 2), int32(n)}, recv)
	}

	// Gather and Scatter, with root 0.
	var all []uint64
	if r == 0 {
		all = make([]uint64, 2*n)
	}
	require.NoError(t, mpi.Gather(c, []uint64{uint64(r), uint64(10 * r)}, all, 0))
	if r == 0 {
		for i := range n {
			assert.Equal(t, []uint64{uint64(i), uint64(10 * i)}, all[2*i:2*i+2], "block %d", i)
		}
	}
	var blocks []float32
	if r == 0 {
		for i := range n {
			blocks = append(blocks, float32(i), float32(-i))
		}
	}
	mine := make([]float32, 2)
	require.NoError(t, mpi.Scatter(c, blocks, mine, 0))
	assert.Equal(t, []float32{float32(r), float32(-r)}, mine)

	// AllToAll: block j of rank i is 100*i + j.
	send, got := make([]int64, n), make([]int64, n)
	for j := range n {
		send[j] = int64(100*r + j)
	}
	require.NoError(t, mpi.AllToAll(c, send, got))
	for i := range n {
		assert.Equal(t, int64(100*i+r), got[i], "from rank %d", i)
	}

	// AllToAllv: rank i sends i+1 elements to every peer; blocks packed in order.
	counts, displs := make([]int, n), make([]int, n)
	rcounts, rdispls := make([]int, n), make([]int, n)
	sv := make([]uint32, 0, n*(r+1))
	total := 0
	for j := range n {
		counts[j], displs[j] = r+1, j*(r+1)
		for k := range r + 1 {
			sv = append(sv, uint32(1000*r+10*j+k))
		}
		rcounts[j], rdispls[j] = j+1, total
		total += j + 1
	}
	rv := make([]uint32, total)
	require.NoError(t, mpi.AllToAllv(c, sv, counts, displs, rv, rcounts, rdispls))
	for i := range n {
		for k := range i + 1 {
			assert.Equal(t, uint32(1000*i+10*r+k), rv[rdispls[i]+k], "from rank %d element %d", i, k)
		}
	}

	// BroadcastInto: send is read on root only.
	var src []int8
	if r == root {
		src = []int8{7, -7, 3}
	}
	dst := make([]int8, 3)
	require.NoError(t, mpi.BroadcastInto(c, src, dst, root))
	assert.Equal(t, []int8{7, -7, 3}, dst)

	// The narrow formats: every rank contributes 1.5 and rank r also r; the sums are
	// exact in every format for up to 4 ranks.
	want := 1.5*float32(n) + float32(n*(n-1)/2)
	bf := []mpi.BFloat16{mpi.NewBFloat16(1.5), mpi.NewBFloat16(float32(r))}
	require.NoError(t, mpi.AllReduce(c, bf, comm.Sum))
	assert.Equal(t, []float32{1.5 * float32(n), float32(n * (n - 1) / 2)}, []float32{bf[0].Float32(), bf[1].Float32()})
	h := []mpi.Float16{mpi.NewFloat16(1.5 + float32(r))}
	require.NoError(t, mpi.AllReduce(c, h, comm.Sum))
	assert.Equal(t, want, h[0].Float32())
	e4 := []mpi.Float8E4M3{mpi.NewFloat8E4M3(1.5 + float32(r))}
	require.NoError(t, mpi.AllReduce(c, e4, comm.Sum))
	assert.Equal(t, want, e4[0].Float32())
	e5 := []mpi.Float8E5M2{mpi.NewFloat8E5M2(float32(r))}
	require.NoError(t, mpi.AllReduce(c, e5, comm.Max))
	assert.Equal(t, float32(n-1), e5[0].Float32())
	// A format's storage is not its bits as an integer: max of E4M3 -2 and +1 is +1,
	// where the bytes' maximum would be 0xc0 (-2).
	m := []mpi.Float8E4M3{mpi.NewFloat8E4M3(-2)}
	if r == 0 {
		m[0] = mpi.NewFloat8E4M3(1)
	}
	require.NoError(t, mpi.AllReduce(c, m, comm.Max))
	assert.Equal(t, float32(1), m[0].Float32())

	// Reduce-scatter: block r of the sums.
	rs := make([]int64, 2*n)
	for j := range rs {
		rs[j] = int64(j + r)
	}
	blk := make([]int64, 2)
	require.NoError(t, mpi.ReduceScatter(c, rs, blk, comm.Sum))
	assert.Equal(t, []int64{int64(n*2*r + n*(n-1)/2), int64(n*(2*r+1) + n*(n-1)/2)}, blk)
}
