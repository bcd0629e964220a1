package commtest_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// fast keeps fault tests short: operations and teardown give up after one second, long
// enough for a loaded CI machine to initialise a cluster.
var fast = commtest.WithCommOptions(nccl.WithTimeout(time.Second), nccl.WithCloseTimeout(time.Second))

func newCluster(t *testing.T, n int, opts ...commtest.Option) *commtest.Cluster {
	t.Helper()
	c, err := commtest.NewCluster(n, append([]commtest.Option{commtest.WithElementType(comm.BFloat16)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// onAll runs f on every rank concurrently and returns the errors.
func onAll(c *commtest.Cluster, f func(rank int, b comm.Backend) error) []error {
	errs := make([]error, c.Size())
	var wg sync.WaitGroup
	for r, b := range c.Backends() {
		wg.Go(func() { errs[r] = f(r, b) })
	}
	wg.Wait()
	return errs
}

func TestNewClusterRejectsBadInput(t *testing.T) {
	_, err := commtest.NewCluster(0)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	_, err = commtest.NewCluster(2, commtest.WithCommOptions(nccl.WithElementType(99)))
	assert.ErrorIs(t, err, comm.ErrInvalidType)

	c := newCluster(t, 2)
	_, err = c.Backend(2)
	assert.ErrorIs(t, err, comm.ErrInvalidRank)
	_, err = c.Alloc(-1, 8)
	assert.ErrorIs(t, err, comm.ErrInvalidRank)
	_, err = c.Alloc(0, 0)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	_, err = c.Read(0, 0, -1)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	_, err = c.ReadValues(0, 0, 42, 1)
	assert.ErrorIs(t, err, comm.ErrInvalidType)
	_, err = c.AddKernel(0, comm.Int8)
	assert.ErrorIs(t, err, comm.ErrInvalidType)
	assert.Error(t, c.Write(0, 0x1234, []byte{1}), "an address that is no allocation")
	assert.Error(t, c.FailCall(0, "cuNoSuchFunction", 1))
}

func TestCloseLeavesNoGoroutinesAndNoDeviceResources(t *testing.T) {
	before := runtime.NumGoroutine()
	c, err := commtest.NewCluster(3, commtest.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	bufs := make([]comm.DevicePtr, 3)
	for r := range 3 {
		bufs[r], err = c.Alloc(r, 256)
		require.NoError(t, err)
	}
	for _, errs := range [][]error{
		onAll(c, func(r int, b comm.Backend) error { _, err := b.RegisterBuffer(bufs[r], 256); return err }),
		onAll(c, func(r int, b comm.Backend) error { _, err := b.SymmetricAlloc(8192); return err }),
		onAll(c, func(r int, b comm.Backend) error { return b.AllReduce(bufs[r], 256) }),
		onAll(c, func(r int, b comm.Backend) error { return b.Barrier() }),
	} {
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
	}
	u, err := c.Usage(0)
	require.NoError(t, err)
	assert.Equal(t, 1, u.Comms)
	assert.Equal(t, 1, u.Registrations)
	assert.Equal(t, 1, u.NCCLAllocs)

	require.NoError(t, c.Close())
	for r := range 3 {
		u, err := c.Usage(r)
		require.NoError(t, err)
		assert.Equal(t, commtest.Usage{Bytes: 256, Allocations: 1}, u,
			"rank %d: only the test's own buffer is left (the backend released its streams, events, scratch, registrations and symmetric memory)", r)
	}
	deadline := time.Now().Add(30 * time.Second) // generous: the machine may be loaded
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left after Close")
}

func TestInjectedRemoteErrorMakesTheBackendUnhealthy(t *testing.T) {
	c := newCluster(t, 2, fast)
	b, err := c.Backend(0)
	require.NoError(t, err)
	require.True(t, b.IsHealthy())
	require.NoError(t, c.InjectAsyncError(0, rawnccl.RemoteError))
	assert.False(t, b.IsHealthy())
	p, _ := c.Alloc(0, 8)
	assert.Error(t, b.AllReduce(p, 8))
	b1, _ := c.Backend(1)
	assert.True(t, b1.IsHealthy(), "only rank 0 saw the error")
}

func TestADeadPeerTimesOutTheSurvivors(t *testing.T) {
	c := newCluster(t, 3, fast)
	require.NoError(t, c.Kill(2))
	p := make([]comm.DevicePtr, 2)
	for r := range 2 {
		p[r], _ = c.Alloc(r, 8)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		b, _ := c.Backend(r)
		wg.Go(func() { errs[r] = b.AllReduce(p[r], 8) })
	}
	wg.Wait()
	for r := range 2 {
		assert.ErrorIs(t, errs[r], comm.ErrTimeout, "rank %d", r)
		b, _ := c.Backend(r)
		assert.False(t, b.IsHealthy())
	}
	start := time.Now()
	_ = c.Close()
	assert.Less(t, time.Since(start), 10*time.Second, "teardown must not hang on the dead rank")
}

func TestAHungOperationTimesOut(t *testing.T) {
	c := newCluster(t, 2, fast)
	require.NoError(t, c.Hang(1, 1))
	errs := onAll(c, func(r int, b comm.Backend) error {
		p, err := c.Alloc(r, 8)
		if err != nil {
			return err
		}
		return b.AllReduce(p, 8)
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r)
	}
}

func TestRecvCommandReturnsTheTransportErrorItSeesWhileWaiting(t *testing.T) {
	c := newCluster(t, 2, fast)
	b, _ := c.Backend(1)
	p, _ := c.Alloc(1, 4)
	done := make(chan error, 1)
	sent := calls(t, c, 1, "ncclBroadcast")
	go func() { done <- b.RecvCommandU32(context.Background(), p, 0) }()
	waitCalls(t, c, 1, "ncclBroadcast", sent+1) // root never sends: the wait has no deadline
	require.NoError(t, c.InjectAsyncError(1, rawnccl.RemoteError))
	select {
	case err := <-done:
		require.Error(t, err)
		assert.False(t, b.IsHealthy())
	case <-time.After(10 * time.Second):
		t.Fatal("RecvCommandU32 did not notice the transport error")
	}
}

func TestFailCallSurfacesTheLibraryError(t *testing.T) {
	c := newCluster(t, 1, fast)
	require.NoError(t, c.FailCall(0, "ncclAllReduce", 1))
	b, _ := c.Backend(0)
	p, _ := c.Alloc(0, 8)
	err := b.AllReduce(p, 8)
	require.Error(t, err)
	assert.True(t, errors.Is(err, commtest.ErrInjected), "%v", err)
	var op *comm.OpError
	assert.ErrorAs(t, err, &op)
}

func TestAddKernelHandlesAreAcceptedAndResultsStayExact(t *testing.T) {
	c := newCluster(t, 2)
	vals := [][]float64{{1, 0.5, -2}, {0.25, 0.5, 2}}
	p := make([]comm.DevicePtr, 2)
	for r := range 2 {
		k, err := c.AddKernel(r, comm.BFloat16)
		require.NoError(t, err)
		b, _ := c.Backend(r)
		require.NoError(t, b.SetAddKernel(k))
		p[r], _ = c.Alloc(r, 6)
		require.NoError(t, c.WriteValues(r, p[r], comm.BFloat16, vals[r]))
	}
	for r, err := range onAll(c, func(r int, b comm.Backend) error { return b.AllReduce(p[r], 6) }) {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range 2 {
		got, err := c.ReadValues(r, p[r], comm.BFloat16, 3)
		require.NoError(t, err)
		assert.Equal(t, []float64{1.25, 1, 0}, got)
	}
}

func TestDriverCallsCountOnlyTheBackends(t *testing.T) {
	c := newCluster(t, 1)
	before := c.DriverCalls()
	p, _ := c.Alloc(0, 8)
	_ = c.Write(0, p, make([]byte, 8))
	s, _ := c.NewStream(0)
	_ = c.SyncStream(0, s)
	assert.Equal(t, before, c.DriverCalls(), "cluster helpers are not library calls")
	b, _ := c.Backend(0)
	require.NoError(t, b.AllReduce(p, 8))
	assert.Greater(t, c.DriverCalls(), before)
}

func TestSurvivorsAndAReplacementReconnectAfterARankDies(t *testing.T) {
	c := newCluster(t, 3, fast, commtest.WithReconnect())
	p := make([]comm.DevicePtr, 3)
	for r := range 3 {
		p[r], _ = c.Alloc(r, 2)
	}
	require.NoError(t, c.Kill(2))
	survivors := c.Backends()[:2]
	for r, err := range onAllOf(survivors, func(r int, b comm.Backend) error { return b.AllReduce(p[r], 2) }) {
		require.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var replaced error
	var wg sync.WaitGroup
	wg.Go(func() { _, replaced = c.Replace(ctx, 2, 1) })
	for r, err := range onAllOf(survivors, func(_ int, b comm.Backend) error { return b.AttemptReconnect(ctx) }) {
		require.NoError(t, err, "rank %d", r)
	}
	wg.Wait()
	require.NoError(t, replaced)

	// The replacement's memory is new: allocate again on rank 2.
	var err error
	p[2], err = c.Alloc(2, 2)
	require.NoError(t, err)
	for r := range 3 {
		require.NoError(t, c.WriteValues(r, p[r], comm.BFloat16, []float64{float64(r + 1)}))
	}
	for r, err := range onAll(c, func(r int, b comm.Backend) error { return b.AllReduce(p[r], 2) }) {
		require.NoError(t, err, "rank %d", r)
	}
	for r, b := range c.Backends() {
		got, err := c.ReadValues(r, p[r], comm.BFloat16, 1)
		require.NoError(t, err)
		assert.Equal(t, []float64{6}, got, "rank %d", r)
		assert.True(t, b.IsHealthy(), "rank %d", r)
	}
	_, err = c.Replace(ctx, 1, 2)
	assert.Error(t, err, "an alive rank cannot be replaced")
}

func onAllOf(bs []comm.Backend, f func(rank int, b comm.Backend) error) []error {
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { errs[r] = f(r, b) })
	}
	wg.Wait()
	return errs
}

// NewCluster requires the element type, as nccl.New does: without one it fails and says
// which option to pass.
func TestNewClusterRequiresTheElementType(t *testing.T) {
	c, err := commtest.NewCluster(2)
	if c != nil {
		_ = c.Close()
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, comm.ErrInvalidType)
	assert.ErrorContains(t, err, "commtest.WithElementType")
	assert.ErrorContains(t, err, "commtest.WithCommOptions(nccl.WithElementType")

	c = newCluster(t, 2, commtest.WithCommOptions(nccl.WithElementType(comm.Float32)))
	assert.Equal(t, comm.Float32, c.NCCLs()[1].ElementType())
}
