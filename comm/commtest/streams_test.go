package commtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// onStreams is a Cluster whose typed communicators are StreamComm views on a caller's
// stream per rank (one view per rank, on streams the test made).
type onStreams struct {
	*commtest.Cluster
	views []comm.Communicator
}

func (o *onStreams) Communicators() []comm.Communicator { return o.views }

// streamHarness runs the suite's typed cases with every operation enqueued on a
// caller's stream instead of the communicator's own.
func streamHarness(world int) commtest.Harness {
	h := commtest.SimHarness(world)
	h.Name += ", typed API on caller streams"
	start := h.Start
	h.Start = func(elem comm.DType) (commtest.Instance, error) {
		inst, err := start(elem)
		if err != nil {
			return nil, err
		}
		c := inst.(*commtest.Cluster)
		o := &onStreams{Cluster: c}
		for r, cc := range c.Communicators() {
			s, err := c.NewStream(r)
			if err == nil {
				var v nccl.StreamComm
				v, err = cc.(*nccl.Communicator).OnStream(s)
				o.views = append(o.views, v)
			}
			if err != nil {
				return nil, errors.Join(err, c.Close())
			}
		}
		return o, nil
	}
	return h
}

func TestConformanceSimulatedNCCLOnCallerStreams(t *testing.T) {
	commtest.RunConformance(t, streamHarness(3))
}

// Typed operations on a caller's stream are ordered with the caller's work on it: a
// copy queued before provides the input, a copy queued after sees the result, nothing
// runs while the stream is held, and the host does not wait; an operation on the
// communicator's own stream is in flight at the same time.
func TestTypedOperationsOnACallerStreamOrderWithItsWork(t *testing.T) {
	const n, count = 2, 8
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type rankState struct {
		s                  comm.Stream
		src, buf, out, own comm.DevicePtr
		v                  nccl.StreamComm
		release            func()
	}
	st := make([]*rankState, n)
	garbage := make([]float64, count)
	for i := range garbage {
		garbage[i] = -7
	}
	for r := range n {
		rs := &rankState{}
		for _, p := range []*comm.DevicePtr{&rs.src, &rs.buf, &rs.out, &rs.own} {
			*p, err = c.Alloc(r, count*4)
			require.NoError(t, err)
			require.NoError(t, c.WriteValues(r, *p, comm.Float32, garbage))
		}
		vals := make([]float64, count)
		for i := range vals {
			vals[i] = float64(r*10 + i)
		}
		require.NoError(t, c.WriteValues(r, rs.src, comm.Float32, vals))
		require.NoError(t, c.WriteValues(r, rs.own, comm.Float32, vals))
		rs.s, err = c.NewStream(r)
		require.NoError(t, err)
		cc := c.Communicators()[r].(*nccl.Communicator)
		rs.v, err = cc.OnStream(rs.s)
		require.NoError(t, err)
		rs.release, err = c.HoldStream(r, rs.s)
		require.NoError(t, err)
		st[r] = rs
	}
	errs := make(chan error, n)
	for r, rs := range st {
		go func() {
			cc := c.Communicators()[r]
			errs <- errors.Join(
				c.CopyAsync(r, rs.buf, rs.src, count*4, rs.s),
				rs.v.AllReduce(rs.buf, count, comm.Float32, comm.Sum),
				c.CopyAsync(r, rs.out, rs.buf, count*4, rs.s),
				cc.AllReduce(rs.own, count, comm.Float32, comm.Max), // the communicator's own stream
			)
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	for r, rs := range st {
		got, err := c.ReadValues(r, rs.out, comm.Float32, count)
		require.NoError(t, err)
		assert.Equal(t, garbage, got, "rank %d: work behind the held stream ran", r)
		got, err = c.ReadValues(r, rs.buf, comm.Float32, count)
		require.NoError(t, err)
		assert.Equal(t, garbage, got, "rank %d: the all-reduce ran before the copy queued ahead of it", r)
	}
	for _, rs := range st {
		rs.release()
	}
	for r, rs := range st {
		go func() {
			errs <- errors.Join(rs.v.Sync(ctx), c.Communicators()[r].Sync(ctx))
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	for r, rs := range st {
		got, err := c.ReadValues(r, rs.out, comm.Float32, count)
		require.NoError(t, err)
		mx, err := c.ReadValues(r, rs.own, comm.Float32, count)
		require.NoError(t, err)
		for i := range count {
			assert.Equal(t, float64(10+2*i), got[i], "rank %d element %d of the sum", r, i)
			assert.Equal(t, float64(10+i), mx[i], "rank %d element %d of the max", r, i)
		}
	}
	_, err = c.Communicators()[0].(*nccl.Communicator).OnStream(0)
	assert.ErrorIs(t, err, comm.ErrUnsupported, "the legacy default stream")
}
