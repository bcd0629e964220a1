package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/internal/nettest"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// Recovery end to end on the simulator: ranks brought up by job.Connect through a
// rendezvous store on loopback, each on a simulated device; a rank dies in the middle
// of a collective; the survivors notice, and come back either with a replacement
// (AttemptReconnect) or without the dead rank (Shrink).

var quietLog = slog.New(slog.DiscardHandler)

// simJob is a world of ranks brought up through comm's bring-up on simulated devices.
type simJob struct {
	devs    *commtest.Cluster
	port    int
	release func() // ends the port's reservation
	opts    []nccl.Option
}

func newJob(world int, opts ...nccl.Option) (*simJob, error) {
	// The store's port stays reserved until rank 0 listens on it (connectAll): a port
	// found free and closed again may be another process's by then.
	port, release, err := nettest.Reserve()
	if err != nil {
		return nil, err
	}
	devs, err := commtest.NewDevices(world)
	if err != nil {
		release()
		return nil, err
	}
	return &simJob{devs: devs, port: port, release: release, opts: append([]nccl.Option{nccl.WithElementType(comm.BFloat16), nccl.WithLogger(quietLog)}, opts...)}, nil
}

// connect brings rank up with job.Connect.
func (j *simJob) connect(ctx context.Context, rank int) (*nccl.Backend, error) {
	dev, err := j.devs.DeviceOption(rank)
	if err != nil {
		return nil, err
	}
	cfg := rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: j.port, Rank: rank, WorldSize: j.devs.Size(), LocalRank: rank}
	return job.Connect(ctx, job.WithJob(cfg), job.WithNCCL(append([]nccl.Option{dev}, j.opts...)...))
}

// connectAll brings up every rank concurrently. Rank 0 then serves the store on the
// job's port, and its reservation ends.
func (j *simJob) connectAll(ctx context.Context) ([]*nccl.Backend, error) {
	defer j.release()
	bs := make([]*nccl.Backend, j.devs.Size())
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r := range bs {
		wg.Go(func() { bs[r], errs[r] = j.connect(ctx, r) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range bs {
			if b != nil {
				_ = b.Close()
			}
		}
		return nil, err
	}
	return bs, nil
}

// dieMidCollective makes every rank but victim start an all-reduce of buf, and victim
// die before it takes part: the others' all-reduces never complete. (The victim dies
// before it enqueues its part so that no work of the dead process is left on its
// device when it is revived.)
func (j *simJob) dieMidCollective(bs []*nccl.Backend, bufs []comm.DevicePtr, bytes, victim int) error {
	for r, b := range bs {
		if r == victim {
			continue
		}
		if err := b.AllReduceAsync(bufs[r], bytes, 0); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return j.devs.Kill(victim)
}

func TestSurvivorsTurnUnhealthyOneWatchdogIntervalAfterTheTimeout(t *testing.T) {
	// The operation timeout also bounds the bring-up's init, where a rank that reaches
	// ncclCommInitRank late keeps the others waiting: a second, as fast gives.
	const interval, timeout = 20 * time.Millisecond, time.Second
	before := runtime.NumGoroutine()
	defer func() { // after every deferred Close below
		deadline := time.Now().Add(30 * time.Second) // generous: the machine may be loaded
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		assert.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left: watchdogs, stores, simulation")
	}()
	j, err := newJob(3, nccl.WithWatchdog(interval), nccl.WithTimeout(timeout), nccl.WithCloseTimeout(time.Second))
	require.NoError(t, err)
	defer j.devs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := j.connectAll(ctx)
	require.NoError(t, err)
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	bufs := make([]comm.DevicePtr, 3)
	for r := range bufs {
		bufs[r], err = j.devs.Alloc(r, 64)
		require.NoError(t, err)
	}
	start := time.Now()
	require.NoError(t, j.dieMidCollective(bs, bufs, 64, 2))
	detected := make([]time.Duration, 2)
	for r := range 2 {
		require.Eventually(t, func() bool { return !bs[r].IsHealthy() }, 10*time.Second, time.Millisecond, "rank %d", r)
		detected[r] = time.Since(start)
	}
	t.Logf("survivors unhealthy after %v (timeout %v, watchdog interval %v)", detected, timeout, interval)
	for r, d := range detected {
		assert.Greater(t, d, timeout, "rank %d: not before the timeout", r)
		// The exact bound (one interval) is checked with a fake clock in package comm;
		// here the slack covers scheduling on a loaded machine (-race while every core
		// is busy), where the watchdog's goroutine or this one may wait seconds.
		assert.Less(t, d, timeout+interval+5*time.Second, "rank %d", r)
		err := bs[r].AllReduce(bufs[r], 64)
		assert.ErrorIs(t, err, comm.ErrUnhealthy, "rank %d", r)
		assert.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r)
	}
}

// recovered is a world that came back from a failure: its ranks' backends, on the
// devices listed (new rank r runs on device devices[r]).
type recovered struct {
	*commtest.Cluster
	backends []*nccl.Backend
	devices  []int
	old      []*nccl.Backend // the failed backends, closed with the world
}

var (
	_ commtest.CommunicatorSource = (*recovered)(nil)
	_ commtest.StreamHolder       = (*recovered)(nil)
	_ commtest.CallCounter        = (*recovered)(nil)
	_ commtest.DeviceOptioner     = (*recovered)(nil)
)

// DeviceOption is the option of the device of the backend at rank.
func (w *recovered) DeviceOption(rank int) (nccl.Option, error) {
	d, err := w.dev(rank)
	if err != nil {
		return nil, err
	}
	return w.Cluster.DeviceOption(d)
}

func (w *recovered) Backends() []comm.Backend {
	out := make([]comm.Backend, len(w.backends))
	for i, b := range w.backends {
		out[i] = b
	}
	return out
}

func (w *recovered) Communicators() []comm.Communicator {
	out := make([]comm.Communicator, len(w.backends))
	for i, b := range w.backends {
		out[i] = b.Communicator()
	}
	return out
}

func (w *recovered) dev(rank int) (int, error) {
	if rank < 0 || rank >= len(w.devices) {
		return 0, fmt.Errorf("rank %d outside [0, %d): %w", rank, len(w.devices), comm.ErrInvalidRank)
	}
	return w.devices[rank], nil
}

// InjectAsyncError injects into the device of the backend at rank.
func (w *recovered) InjectAsyncError(rank int, code rawnccl.Result) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.InjectAsyncError(d, code)
}

func (w *recovered) Alloc(rank, bytes int) (comm.DevicePtr, error) {
	d, err := w.dev(rank)
	if err != nil {
		return 0, err
	}
	return w.Cluster.Alloc(d, bytes)
}

func (w *recovered) Free(rank int, p comm.DevicePtr) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.Free(d, p)
}

func (w *recovered) Write(rank int, p comm.DevicePtr, data []byte) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.Write(d, p, data)
}

func (w *recovered) Read(rank int, p comm.DevicePtr, n int) ([]byte, error) {
	d, err := w.dev(rank)
	if err != nil {
		return nil, err
	}
	return w.Cluster.Read(d, p, n)
}

func (w *recovered) NewStream(rank int) (comm.Stream, error) {
	d, err := w.dev(rank)
	if err != nil {
		return 0, err
	}
	return w.Cluster.NewStream(d)
}

func (w *recovered) DestroyStream(rank int, s comm.Stream) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.DestroyStream(d, s)
}

func (w *recovered) CopyAsync(rank int, dst, src comm.DevicePtr, bytes int, s comm.Stream) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.CopyAsync(d, dst, src, bytes, s)
}

func (w *recovered) SyncStream(rank int, s comm.Stream) error {
	d, err := w.dev(rank)
	if err != nil {
		return err
	}
	return w.Cluster.SyncStream(d, s)
}

func (w *recovered) HoldStream(rank int, s comm.Stream) (func(), error) {
	d, err := w.dev(rank)
	if err != nil {
		return nil, err
	}
	return w.Cluster.HoldStream(d, s)
}

func (w *recovered) Close() error {
	var errs []error
	for r, b := range w.backends {
		if err := b.Close(); err != nil && !errors.Is(err, comm.ErrClosed) {
			errs = append(errs, fmt.Errorf("close rank %d: %w", r, err))
		}
	}
	for _, b := range w.old {
		_ = b.Close() // failed backends: their teardown errors are expected
	}
	return errors.Join(append(errs, w.Cluster.Close())...)
}

// failed brings up a world of three ranks with element type elem and kills victim in
// the middle of an all-reduce.
func failed(elem comm.DType, victim int) (*simJob, []*nccl.Backend, error) {
	j, err := newJob(3, nccl.WithElementType(elem), nccl.WithTimeout(time.Minute), nccl.WithCloseTimeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bs, err := j.connectAll(ctx)
	if err != nil {
		_ = j.devs.Close()
		return nil, nil, err
	}
	bufs := make([]comm.DevicePtr, 3)
	for r := range bufs {
		if bufs[r], err = j.devs.Alloc(r, 8); err != nil {
			break
		}
	}
	if err == nil {
		err = j.dieMidCollective(bs, bufs, 8, victim)
	}
	if err != nil {
		for _, b := range bs {
			_ = b.Close()
		}
		_ = j.devs.Close()
		return nil, nil, err
	}
	return j, bs, nil
}

// reconnectHarness: the survivors call AttemptReconnect while a restarted rank 2 calls
// job.Connect; they meet in the job's next generation.
func reconnectHarness() commtest.Harness {
	return commtest.Harness{
		Name:  "simulated NCCL via job.Connect, rank 2 replaced after it died",
		World: 3,
		Start: func(elem comm.DType) (commtest.Instance, error) {
			const victim = 2
			j, bs, err := failed(elem, victim)
			if err != nil {
				return nil, err
			}
			_ = bs[victim].Close() // the dead process is gone
			w := &recovered{Cluster: j.devs, backends: []*nccl.Backend{bs[0], bs[1]}, devices: []int{0, 1, 2},
				old: []*nccl.Backend{bs[victim]}}
			if err := j.devs.Revive(victim); err != nil {
				return nil, errors.Join(err, w.Close())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			errs := make([]error, 3)
			var replacement *nccl.Backend
			var wg sync.WaitGroup
			for r := range 3 {
				wg.Go(func() {
					if r == victim {
						replacement, errs[r] = j.connect(ctx, r)
						return
					}
					errs[r] = bs[r].AttemptReconnect(ctx)
				})
			}
			wg.Wait()
			if replacement != nil {
				w.backends = append(w.backends, replacement)
			}
			if err := errors.Join(errs...); err != nil {
				return nil, errors.Join(err, w.Close())
			}
			return w, nil
		},
	}
}

// shrinkHarness: rank 1 dies and the survivors, ranks 0 and 2, shrink to a world of
// two in which rank 2 becomes rank 1.
func shrinkHarness() commtest.Harness {
	return commtest.Harness{
		Name:  "simulated NCCL via job.Connect, shrunk after rank 1 died",
		World: 2,
		Start: func(elem comm.DType) (commtest.Instance, error) {
			const victim = 1
			j, bs, err := failed(elem, victim)
			if err != nil {
				return nil, err
			}
			w := &recovered{Cluster: j.devs, devices: []int{0, 2}, old: bs}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			shrunk := make([]*nccl.Backend, 2)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i, old := range []int{0, 2} {
				wg.Go(func() { shrunk[i], errs[i] = bs[old].Shrink(ctx, []int{victim}) })
			}
			wg.Wait()
			for i, b := range shrunk {
				if b != nil {
					w.backends = append(w.backends, b)
					if b.Rank() != i || b.WorldSize() != 2 {
						errs = append(errs, fmt.Errorf("shrunk rank %d of %d, want %d of 2", b.Rank(), b.WorldSize(), i))
					}
				}
			}
			if err := errors.Join(errs...); err != nil {
				return nil, errors.Join(err, w.Close())
			}
			return w, nil
		},
	}
}

func TestConformanceAfterReconnectWithAReplacement(t *testing.T) {
	commtest.RunConformance(t, reconnectHarness())
}

func TestConformanceAfterShrink(t *testing.T) {
	commtest.RunConformance(t, shrinkHarness())
}

func TestShrinkNeedsNCCL227(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16), commtest.WithNCCLVersion(22603))
	require.NoError(t, err)
	defer c.Close()
	b, err := c.NCCL(0)
	require.NoError(t, err)
	_, err = b.Shrink(context.Background(), []int{1})
	require.ErrorIs(t, err, comm.ErrUnsupported)
	assert.Contains(t, err.Error(), "needs NCCL 2.27.3 (loaded 2.26.3)")
	assert.True(t, b.IsHealthy(), "nothing was revoked")
}

// On NCCL 2.27 (no ncclCommRevoke) Shrink ends the dead rank's collective with
// NCCL_SHRINK_ABORT.
func TestShrinkOnNCCL227(t *testing.T) {
	c, err := commtest.NewCluster(3, commtest.WithElementType(comm.BFloat16), commtest.WithNCCLVersion(22703), fast)
	require.NoError(t, err)
	defer c.Close()
	bufs := make([]comm.DevicePtr, 3)
	for r := range bufs {
		bufs[r], err = c.Alloc(r, 2)
		require.NoError(t, err)
	}
	require.NoError(t, c.Delay(0, time.Hour))
	for r, b := range c.Backends() {
		require.NoError(t, b.AllReduceAsync(bufs[r], 2, 0), "rank %d", r)
	}
	require.NoError(t, c.Kill(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shrunk := make([]*nccl.Backend, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for _, r := range []int{1, 2} {
		b, err := c.NCCL(r)
		require.NoError(t, err)
		wg.Go(func() { shrunk[r], errs[r] = b.Shrink(ctx, []int{0}) })
	}
	wg.Wait()
	for _, r := range []int{1, 2} {
		require.NoError(t, errs[r], "rank %d", r)
		defer shrunk[r].Close()
		assert.Equal(t, r-1, shrunk[r].Rank())
		require.NoError(t, c.WriteValues(r, bufs[r], comm.BFloat16, []float64{float64(r)}))
	}
	for _, r := range []int{1, 2} {
		wg.Go(func() { errs[r] = shrunk[r].AllReduce(bufs[r], 2) })
	}
	wg.Wait()
	for _, r := range []int{1, 2} {
		require.NoError(t, errs[r], "rank %d", r)
		got, err := c.ReadValues(r, bufs[r], comm.BFloat16, 1)
		require.NoError(t, err)
		assert.Equal(t, []float64{3}, got, "rank %d", r)
	}
}
