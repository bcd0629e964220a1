package commtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// The new collectives on every NCCL version the backend chooses a different path for:
// ncclAlltoAll/Gather/Scatter from 2.28.3, grouped send/recv before.
func TestConformanceSimulatedNCCLCollectivePaths(t *testing.T) {
	for _, v := range []int{22803, 22802} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			commtest.RunConformance(t, commtest.SimHarness(3, commtest.WithNCCLVersion(v)))
		})
	}
}

// checkCollectivePath runs AllToAll, Gather and Scatter on a 3-rank cluster reporting
// NCCL version v and checks, from the calls rank 0 made, that they took ncclAlltoAll,
// ncclGather and ncclScatter exactly when v >= 2.28.3, and grouped ncclSend/ncclRecv
// otherwise, with the same results.
func checkCollectivePath(t *testing.T, v int) {
	const n, count = 3, 4
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithNCCLVersion(v))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	cs := c.Communicators()
	bytes := count * 4
	alloc := func(r, size int, vals []float64) comm.DevicePtr {
		p, err := c.Alloc(r, size)
		require.NoError(t, err)
		if vals != nil {
			require.NoError(t, c.WriteValues(r, p, comm.Int32, vals))
		}
		return p
	}
	send, recv := make([]comm.DevicePtr, n), make([]comm.DevicePtr, n)
	for r := range n {
		vals := make([]float64, count*n)
		for i := range vals {
			vals[i] = float64(100*r + i)
		}
		send[r], recv[r] = alloc(r, bytes*n, vals), alloc(r, bytes*n, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := func(f func(r int) error) {
		t.Helper()
		errs := make(chan error, n)
		for r := range n {
			go func() {
				if err := f(r); err != nil {
					errs <- err
					return
				}
				errs <- cs[r].Sync(ctx)
			}()
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
	before := map[string]int64{}
	calls := []string{"ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend", "ncclRecv", "ncclGroupStart"}
	for _, call := range calls {
		before[call], err = c.Calls(0, call)
		require.NoError(t, err)
	}
	all(func(r int) error { return cs[r].AllToAll(send[r], recv[r], count, comm.Int32) })
	got, err := c.ReadValues(1, recv[1], comm.Int32, count*n)
	require.NoError(t, err)
	for i, x := range got { // block q of rank 1's result is block 1 of rank q's input
		q, k := i/count, i%count
		require.Equal(t, float64(100*q+count+k), x, "all-to-all element %d on rank 1", i)
	}
	all(func(r int) error { return cs[r].Gather(send[r], recv[r], count, comm.Int32, 0) })
	all(func(r int) error { return cs[r].Scatter(send[r], recv[r], count, comm.Int32, 2) })
	got, err = c.ReadValues(1, recv[1], comm.Int32, count)
	require.NoError(t, err)
	for k, x := range got {
		require.Equal(t, float64(200+count+k), x, "scatter element %d on rank 1", k)
	}

	delta := map[string]int64{}
	for _, call := range calls {
		now, err := c.Calls(0, call)
		require.NoError(t, err)
		delta[call] = now - before[call]
	}
	if v >= 22803 {
		assert.Equal(t, map[string]int64{"ncclAlltoAll": 1, "ncclGather": 1, "ncclScatter": 1,
			"ncclSend": 0, "ncclRecv": 0, "ncclGroupStart": 0}, delta, "NCCL %d has the collectives", v)
		return
	}
	// Rank 0: all-to-all sends to and receives from both peers; as gather's root it
	// receives from both; as a non-root of scatter it receives once.
	assert.Equal(t, map[string]int64{"ncclAlltoAll": 0, "ncclGather": 0, "ncclScatter": 0,
		"ncclSend": 2, "ncclRecv": 5, "ncclGroupStart": 3}, delta, "NCCL %d lacks the collectives", v)
}

func TestCollectivesChooseThePathFromTheVersion(t *testing.T) {
	for _, v := range []int{22907, 22803, 22802, 22203} {
		t.Run(fmt.Sprint(v), func(t *testing.T) { checkCollectivePath(t, v) })
	}
}

// A PreMulSum operator belongs to the communicator it was made on: after
// AttemptReconnect replaced it, using the operator fails with ErrInvalidOp before
// reaching NCCL, and a new one works.
func TestPreMulSumDoesNotSurviveReconnect(t *testing.T) {
	const n = 2
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithReconnect())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ops := make([]comm.ReduceOp, n)
	ps := make([]comm.DevicePtr, n)
	each := func(f func(r int, b *nccl.Backend) error) { t.Helper(); eachBackend(t, c, f) }
	each(func(r int, b *nccl.Backend) (err error) {
		if ps[r], err = c.Alloc(r, 4); err != nil {
			return err
		}
		ops[r], err = b.Communicator().PreMulSum(comm.Float32, 3)
		return err
	})
	each(func(_ int, b *nccl.Backend) error { return b.AttemptReconnect(ctx) })
	calls := c.DriverCalls()
	b, err := c.NCCL(0)
	require.NoError(t, err)
	err = b.Communicator().AllReduce(ps[0], 1, comm.Float32, ops[0])
	require.ErrorIs(t, err, comm.ErrInvalidOp)
	assert.Contains(t, err.Error(), "lost in a reconnect")
	assert.Equal(t, calls, c.DriverCalls(), "the stale operator reached the library")

	each(func(r int, b *nccl.Backend) error {
		if err := c.WriteValues(r, ps[r], comm.Float32, []float64{float64(r + 1)}); err != nil {
			return err
		}
		cc := b.Communicator()
		op, err := cc.PreMulSum(comm.Float32, 3)
		if err != nil {
			return err
		}
		if err := cc.AllReduce(ps[r], 1, comm.Float32, op); err != nil {
			return err
		}
		return cc.Sync(ctx)
	})
	got, err := c.ReadValues(1, ps[1], comm.Float32, 1)
	require.NoError(t, err)
	assert.Equal(t, []float64{9}, got, "3*1 + 3*2")
}

// eachBackend runs f on every rank's backend of c concurrently, as separate processes
// would, and requires every call to succeed.
func eachBackend(t *testing.T, c *commtest.Cluster, f func(r int, b *nccl.Backend) error) {
	t.Helper()
	n := c.Size()
	errs := make(chan error, n)
	for r := range n {
		b, err := c.NCCL(r)
		require.NoError(t, err)
		go func() { errs <- f(r, b) }()
	}
	for range n {
		require.NoError(t, <-errs)
	}
}
