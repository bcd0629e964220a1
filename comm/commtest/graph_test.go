package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

const replays = 100

// graphRank is one rank's stream, buffers and typed view for a captured step.
type graphRank struct {
	s             comm.Stream
	in, buf, recv comm.DevicePtr
	v             nccl.StreamComm
	g             *commtest.Graph
}

func newGraphRanks(t *testing.T, c *commtest.Cluster, count int) []*graphRank {
	t.Helper()
	rs := make([]*graphRank, c.Size())
	for r := range rs {
		g := &graphRank{}
		var err error
		for _, p := range []*comm.DevicePtr{&g.in, &g.buf, &g.recv} {
			*p, err = c.Alloc(r, count*4)
			require.NoError(t, err)
		}
		g.s, err = c.NewStream(r)
		require.NoError(t, err)
		g.v, err = c.Communicators()[r].(*nccl.Communicator).OnStream(g.s)
		require.NoError(t, err)
		rs[r] = g
	}
	return rs
}

// stepInput is rank's input of replay k: distinct per rank, replay and element.
func stepInput(rank, k, count int) []float64 {
	v := make([]float64, count)
	for i := range v {
		v[i] = float64(rank*1000 + k*7 + i)
	}
	return v
}

// capture records step on every rank's stream into a graph; nothing may allocate
// device memory meanwhile.
func capture(t *testing.T, c *commtest.Cluster, rs []*graphRank, step func(r int, g *graphRank) error) {
	t.Helper()
	for r, g := range rs {
		allocs, err := c.Calls(r, "cuMemAlloc_v2")
		require.NoError(t, err)
		require.NoError(t, c.BeginCapture(r, g.s))
		require.NoError(t, step(r, g), "rank %d: capture", r)
		capturing, err := c.IsCapturing(r, g.s)
		require.NoError(t, err)
		require.True(t, capturing)
		g.g, err = c.EndCapture(r, g.s)
		require.NoError(t, err, "rank %d", r)
		after, err := c.Calls(r, "cuMemAlloc_v2")
		require.NoError(t, err)
		assert.Equal(t, allocs, after, "rank %d: device memory allocated during capture", r)
	}
}

// replay launches every rank's graph replays times, each time after writing replay
// k's inputs, and checks the results with check.
func replay(t *testing.T, c *commtest.Cluster, rs []*graphRank, count int, check func(r, k int, g *graphRank)) {
	t.Helper()
	for k := range replays {
		for r, g := range rs {
			require.NoError(t, c.WriteValues(r, g.in, comm.Float32, stepInput(r, k, count)))
		}
		for r, g := range rs {
			require.NoError(t, g.g.Launch(g.s), "rank %d replay %d", r, k)
		}
		for r, g := range rs {
			require.NoError(t, c.SyncStream(r, g.s), "rank %d replay %d", r, k)
		}
		for r, g := range rs {
			check(r, k, g)
		}
	}
}

func sumOf(n, k, count int) []float64 {
	want := make([]float64, count)
	for r := range n {
		for i, x := range stepInput(r, k, count) {
			want[i] += x
		}
	}
	return want
}

// An all-reduce on a caller's stream, captured with the copy of its input, replays
// 100 times with the sum of that replay's inputs each time; the communicator's own
// operations between replays keep matching across ranks.
func TestCapturedAllReduceReplays(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			const count = 64
			c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			rs := newGraphRanks(t, c, count)
			capture(t, c, rs, func(r int, g *graphRank) error {
				return errors.Join(
					c.CopyAsync(r, g.buf, g.in, count*4, g.s),
					g.v.AllReduce(g.buf, count, comm.Float32, comm.Sum))
			})
			replay(t, c, rs, count, func(r, k int, g *graphRank) {
				got, err := c.ReadValues(r, g.buf, comm.Float32, count)
				require.NoError(t, err)
				require.Equal(t, sumOf(n, k, count), got, "rank %d replay %d", r, k)
			})
		})
	}
}

// AllReduceAsync on a capturing compute stream forks the communication stream into
// the capture and joins it back; on two ranks with the add kernel it takes
// ncclAllReduce instead of the two-rank path, which would allocate its scratch
// buffer and query the stream.
func TestCapturedAllReduceAsyncReplays(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			const count = 64
			c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithTwoRankThreshold(1<<20), nccl.WithElementType(comm.Float32)))
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			rs := newGraphRanks(t, c, count)
			bs := make([]*nccl.Backend, n)
			for r := range bs {
				bs[r], err = c.NCCL(r)
				require.NoError(t, err)
				k, err := c.AddKernel(r, comm.Float32)
				require.NoError(t, err)
				require.NoError(t, bs[r].SetAddKernel(k))
			}
			capture(t, c, rs, func(r int, g *graphRank) error {
				return errors.Join(
					c.CopyAsync(r, g.buf, g.in, count*4, g.s),
					bs[r].AllReduceAsync(g.buf, count*4, g.s))
			})
			replay(t, c, rs, count, func(r, k int, g *graphRank) {
				got, err := c.ReadValues(r, g.buf, comm.Float32, count)
				require.NoError(t, err)
				require.Equal(t, sumOf(n, k, count), got, "rank %d replay %d", r, k)
			})
		})
	}
}

// A grouped send/recv ring, captured, replays 100 times: every replay is a new
// message of each pair, carrying that replay's data.
func TestCapturedGroupedSendRecvReplays(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			const count = 32
			c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			rs := newGraphRanks(t, c, count)
			capture(t, c, rs, func(r int, g *graphRank) error {
				if err := g.v.GroupStart(); err != nil {
					return err
				}
				return errors.Join(
					g.v.Send(g.in, count, comm.Float32, (r+1)%n, 0),
					g.v.Recv(g.recv, count, comm.Float32, (r+n-1)%n, 0),
					g.v.GroupEnd())
			})
			replay(t, c, rs, count, func(r, k int, g *graphRank) {
				got, err := c.ReadValues(r, g.recv, comm.Float32, count)
				require.NoError(t, err)
				require.Equal(t, stepInput((r+n-1)%n, k, count), got, "rank %d replay %d", r, k)
			})
		})
	}
}

// What waits for its work fails with ErrCapturing on a capturing stream, enqueues
// nothing and leaves the capture valid: the graph then holds only the all-reduce.
func TestOperationsThatWaitAreRejectedDuringCapture(t *testing.T) {
	const n, count = 2, 16
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs := newGraphRanks(t, c, count)
	for r, g := range rs {
		require.NoError(t, c.WriteValues(r, g.buf, comm.Float32, stepInput(r, 0, count)))
	}
	capture(t, c, rs, func(r int, g *graphRank) error {
		cc := g.v.Communicator()
		b, err := c.Backend(r)
		if err != nil {
			return err
		}
		// Capture the communication stream too: the engine's graph then holds what the
		// communicator's own typed operations enqueue.
		if err := c.BeginCapture(r, cc.CommStream()); err != nil {
			return err
		}
		capturing, err := cc.IsCapturing(cc.CommStream())
		if err != nil || !capturing {
			return fmt.Errorf("communication stream capturing %v: %v", capturing, err)
		}
		rejected := map[string]error{
			"StreamComm.Sync":            g.v.Sync(ctx),
			"StreamComm.Barrier":         g.v.Barrier(ctx),
			"NCCLCommunicator.Sync":      cc.Sync(ctx),
			"NCCLCommunicator.Barrier":   cc.Barrier(ctx),
			"NCCL.AllReduce (blocking)":  b.AllReduce(g.buf, count*4),
			"NCCL.AllGather (blocking)":  b.AllGather(g.buf, g.recv, 4),
			"NCCL.RecvCommandU32":        b.RecvCommandU32(ctx, g.recv, (r+1)%n),
			"NCCL.Broadcast (blocking)":  b.Broadcast(g.buf, 4, 0),
			"NCCL.ReduceScatter (block)": b.ReduceScatter(g.buf, g.recv, 4),
		}
		for name, err := range rejected {
			if !errors.Is(err, nccl.ErrCapturing) {
				return fmt.Errorf("%s during capture: got %v, want ErrCapturing", name, err)
			}
		}
		if _, err := c.EndCapture(r, cc.CommStream()); err != nil { // nothing was recorded on it
			return err
		}
		if !cc.IsHealthy() {
			return errors.New("communicator unhealthy after the rejections")
		}
		return g.v.AllReduce(g.buf, count, comm.Float32, comm.Sum)
	})
	for r, g := range rs {
		require.NoError(t, g.g.Launch(g.s))
		_ = r
	}
	for r, g := range rs {
		require.NoError(t, c.SyncStream(r, g.s))
		got, err := c.ReadValues(r, g.buf, comm.Float32, count)
		require.NoError(t, err)
		assert.Equal(t, sumOf(n, 0, count), got, "rank %d: the graph ran more or less than its all-reduce", r)
	}
	// Outside capture the same calls work again.
	for _, cc := range c.Communicators() {
		require.NoError(t, cc.(*nccl.Communicator).Sync(ctx))
	}
}

// The watchdog records no event on a capturing communication stream (it could not
// query it): the capture stays valid and the communicator healthy.
func TestWatchdogLeavesACaptureValid(t *testing.T) {
	const n, count = 2, 8
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithWatchdog(time.Millisecond)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	bufs := make([]comm.DevicePtr, n)
	graphs := make([]*commtest.Graph, n)
	for r, cc := range c.Communicators() {
		nc := cc.(*nccl.Communicator)
		bufs[r], err = c.Alloc(r, count*4)
		require.NoError(t, err)
		require.NoError(t, c.WriteValues(r, bufs[r], comm.Float32, stepInput(r, 0, count)))
		s := nc.CommStream()
		require.NoError(t, c.BeginCapture(r, s))
		// Counted before the operation: the watchdog may ask as soon as it is enqueued.
		asked := calls(t, c, r, "cuStreamIsCapturing")
		require.NoError(t, nc.AllReduce(bufs[r], count, comm.Float32, comm.Sum))
		// The watchdog's next round sees the enqueued work and asks whether the stream
		// captures before marking it; two rounds later it would have queried a mark.
		waitCalls(t, c, r, "cuStreamIsCapturing", asked+1)
		waitCalls(t, c, r, "ncclCommGetAsyncError", calls(t, c, r, "ncclCommGetAsyncError")+2)
		graphs[r], err = c.EndCapture(r, s)
		require.NoError(t, err, "rank %d", r)
		require.True(t, nc.IsHealthy(), "rank %d", r)
	}
	for r, cc := range c.Communicators() {
		require.NoError(t, graphs[r].Launch(cc.(*nccl.Communicator).CommStream()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, cc := range c.Communicators() {
		require.NoError(t, cc.(*nccl.Communicator).Sync(ctx))
		got, err := c.ReadValues(r, bufs[r], comm.Float32, count)
		require.NoError(t, err)
		assert.Equal(t, sumOf(n, 0, count), got, "rank %d", r)
	}
}

// calls is how many calls of call rank has made so far.
func calls(t *testing.T, c *commtest.Cluster, rank int, call string) int64 {
	t.Helper()
	n, err := c.Calls(rank, call)
	require.NoError(t, err)
	return n
}

// waitCalls waits (a minute at most) until rank has made want calls of call in all.
func waitCalls(t *testing.T, c *commtest.Cluster, rank int, call string, want int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if n := calls(t, c, rank, call); n >= want {
			return
		}
		require.True(t, time.Now().Before(deadline), "rank %d: the watchdog made %d %s calls in a minute, not %d", rank, calls(t, c, rank, call), call, want)
		time.Sleep(time.Millisecond)
	}
}
