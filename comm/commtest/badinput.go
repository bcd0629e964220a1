package commtest

import (
	"context"
	"math"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
)

type badCall struct {
	name string
	call func(b comm.Backend) error
	want error
}

// badInput checks every method with every invalid input on rank 0: the right sentinel,
// no panic, and (when the instance counts them) no library call.
func (e *env) badInput(t *testing.T) {
	n, es := e.n, e.es
	p := e.buffers(t, 4096, nil)[0]
	ctx := context.Background()
	var s comm.Stream
	cases := []badCall{
		{"all-reduce negative bytes", func(b comm.Backend) error { return b.AllReduce(p, -es) }, comm.ErrInvalidSize},
		{"all-reduce bytes not a multiple of the element", func(b comm.Backend) error { return b.AllReduce(p, es+1) }, comm.ErrInvalidSize},
		{"all-reduce null pointer", func(b comm.Backend) error { return b.AllReduce(0, es) }, comm.ErrNullPointer},
		{"all-reduce-async negative bytes", func(b comm.Backend) error { return b.AllReduceAsync(p, -1, s) }, comm.ErrInvalidSize},
		{"all-reduce-async bytes not a multiple", func(b comm.Backend) error { return b.AllReduceAsync(p, 3*es+1, s) }, comm.ErrInvalidSize},
		{"all-reduce-async null pointer", func(b comm.Backend) error { return b.AllReduceAsync(0, es, s) }, comm.ErrNullPointer},
		{"all-gather negative bytes", func(b comm.Backend) error { return b.AllGather(p, p, -1) }, comm.ErrInvalidSize},
		{"all-gather null send", func(b comm.Backend) error { return b.AllGather(0, p, 8) }, comm.ErrNullPointer},
		{"all-gather null recv", func(b comm.Backend) error { return b.AllGather(p, 0, 8) }, comm.ErrNullPointer},
		{"reduce-scatter negative bytes", func(b comm.Backend) error { return b.ReduceScatter(p, p, -es) }, comm.ErrInvalidSize},
		{"reduce-scatter bytes not a multiple", func(b comm.Backend) error { return b.ReduceScatter(p, p, es+1) }, comm.ErrInvalidSize},
		{"reduce-scatter null send", func(b comm.Backend) error { return b.ReduceScatter(0, p, es) }, comm.ErrNullPointer},
		{"reduce-scatter null recv", func(b comm.Backend) error { return b.ReduceScatter(p, 0, es) }, comm.ErrNullPointer},
		{"all-gather send inside recv off its in-place block", func(b comm.Backend) error { return b.AllGather(p+comm.DevicePtr(es), p, 2*es) }, comm.ErrOverlap},
		{"reduce-scatter recv inside send off its in-place block", func(b comm.Backend) error { return b.ReduceScatter(p, p+comm.DevicePtr(es), 2*es) }, comm.ErrOverlap},
		{"broadcast root negative", func(b comm.Backend) error { return b.Broadcast(p, 8, -1) }, comm.ErrInvalidRank},
		{"broadcast root = world size", func(b comm.Backend) error { return b.Broadcast(p, 8, n) }, comm.ErrInvalidRank},
		{"broadcast negative bytes", func(b comm.Backend) error { return b.Broadcast(p, -8, 0) }, comm.ErrInvalidSize},
		{"broadcast null pointer", func(b comm.Backend) error { return b.Broadcast(0, 8, 0) }, comm.ErrNullPointer},
		{"send dest negative", func(b comm.Backend) error { return b.SendTo(p, 8, -1, s) }, comm.ErrInvalidRank},
		{"send dest = world size", func(b comm.Backend) error { return b.SendTo(p, 8, n, s) }, comm.ErrInvalidRank},
		{"send negative bytes", func(b comm.Backend) error { return b.SendTo(p, -8, 0, s) }, comm.ErrInvalidSize},
		{"send null pointer", func(b comm.Backend) error { return b.SendTo(0, 8, 0, s) }, comm.ErrNullPointer},
		{"recv src negative", func(b comm.Backend) error { return b.RecvFrom(p, 8, -1, s) }, comm.ErrInvalidRank},
		{"recv src = world size", func(b comm.Backend) error { return b.RecvFrom(p, 8, n, s) }, comm.ErrInvalidRank},
		{"recv negative bytes", func(b comm.Backend) error { return b.RecvFrom(p, -8, 0, s) }, comm.ErrInvalidSize},
		{"recv null pointer", func(b comm.Backend) error { return b.RecvFrom(0, 8, 0, s) }, comm.ErrNullPointer},
		{"recv-command on the root itself", func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, 0) }, comm.ErrInvalidRank},
		{"recv-command root = world size", func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, n) }, comm.ErrInvalidRank},
		{"recv-command root negative", func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, -1) }, comm.ErrInvalidRank},
		{"register zero bytes", func(b comm.Backend) error { _, err := b.RegisterBuffer(p, 0); return err }, comm.ErrInvalidSize},
		{"register negative bytes", func(b comm.Backend) error { _, err := b.RegisterBuffer(p, -1); return err }, comm.ErrInvalidSize},
		{"register null pointer", func(b comm.Backend) error { _, err := b.RegisterBuffer(0, 64); return err }, comm.ErrNullPointer},
		{"deregister unknown handle", func(b comm.Backend) error { return b.DeregisterBuffer(987654) }, comm.ErrUnknownHandle},
		{"symmetric-alloc zero bytes", func(b comm.Backend) error { _, err := b.SymmetricAlloc(0); return err }, comm.ErrInvalidSize},
		{"symmetric-alloc negative bytes", func(b comm.Backend) error { _, err := b.SymmetricAlloc(-4096); return err }, comm.ErrInvalidSize},
		{"symmetric-free unknown pointer", func(b comm.Backend) error { return b.SymmetricFree(p) }, comm.ErrUnknownPointer},
		{"set-add-kernel null kernel", func(b comm.Backend) error { return b.SetAddKernel(0) }, comm.ErrNullPointer},
		{"group-end without group-start", func(b comm.Backend) error { return b.GroupEnd() }, comm.ErrGroupNotOpen},
	}
	if es > 1 { // element-typed reductions need element-aligned pointers
		cases = append(cases,
			badCall{"all-reduce misaligned pointer", func(b comm.Backend) error { return b.AllReduce(p+1, es) }, comm.ErrMisaligned},
			badCall{"all-reduce-async misaligned pointer", func(b comm.Backend) error { return b.AllReduceAsync(p+1, es, s) }, comm.ErrMisaligned},
			badCall{"reduce-scatter misaligned send", func(b comm.Backend) error { return b.ReduceScatter(p+1, p, es) }, comm.ErrMisaligned},
			badCall{"reduce-scatter misaligned recv", func(b comm.Backend) error { return b.ReduceScatter(p, p+1, es) }, comm.ErrMisaligned},
		)
	}
	if n > 1 {
		cases = append(cases,
			badCall{"recv-command null pointer", func(b comm.Backend) error { return b.RecvCommandU32(ctx, 0, 1) }, comm.ErrNullPointer},
			badCall{"all-gather total size overflows", func(b comm.Backend) error { return b.AllGather(p, p, math.MaxInt/n+2) }, comm.ErrInvalidSize},
			badCall{"reduce-scatter total size overflows", func(b comm.Backend) error {
				return b.ReduceScatter(p, p, (math.MaxInt/n+2)/es*es)
			}, comm.ErrInvalidSize},
		)
	}
	b := e.b[0]
	t.Run("arguments", func(t *testing.T) {
		for _, c := range cases {
			e.expectFailure(t, c.name, func() error { return c.call(b) }, c.want)
		}
	})
	t.Run("groups", func(t *testing.T) {
		require.NoError(t, b.GroupStart())
		require.NoError(t, b.GroupStart())
		inGroup := []badCall{
			{"all-reduce-async inside a group", func(b comm.Backend) error { return b.AllReduceAsync(p, es, s) }, comm.ErrGroupOpen},
			{"recv-command inside a group", func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, 0) }, comm.ErrGroupOpen},
			{"symmetric-alloc inside a group", func(b comm.Backend) error { _, err := b.SymmetricAlloc(4096); return err }, comm.ErrGroupOpen},
			{"symmetric-free inside a group", func(b comm.Backend) error { return b.SymmetricFree(p) }, comm.ErrGroupOpen},
			{"attempt-reconnect inside a group", func(b comm.Backend) error { return b.AttemptReconnect(ctx) }, comm.ErrGroupOpen},
		}
		for _, c := range inGroup {
			e.expectFailure(t, c.name, func() error { return c.call(b) }, c.want)
		}
		require.NoError(t, b.GroupEnd())
		require.NoError(t, b.GroupEnd())
		e.expectFailure(t, "one group-end too many", b.GroupEnd, comm.ErrGroupNotOpen)
	})
	src, typed := e.inst.(CommunicatorSource)
	if typed {
		t.Run("typed-arguments", func(t *testing.T) { e.badTyped(t, src.Communicators()[0], p) })
	}
	t.Run("after-close", func(t *testing.T) {
		e.all(t, func(r int) error { return e.b[r].Close() })
		after := []badCall{
			{"all-reduce", func(b comm.Backend) error { return b.AllReduce(p, es) }, comm.ErrClosed},
			{"all-reduce-async", func(b comm.Backend) error { return b.AllReduceAsync(p, es, s) }, comm.ErrClosed},
			{"all-gather", func(b comm.Backend) error { return b.AllGather(p, p, es) }, comm.ErrClosed},
			{"reduce-scatter", func(b comm.Backend) error { return b.ReduceScatter(p, p, es) }, comm.ErrClosed},
			{"broadcast", func(b comm.Backend) error { return b.Broadcast(p, es, 0) }, comm.ErrClosed},
			{"barrier", func(b comm.Backend) error { return b.Barrier() }, comm.ErrClosed},
			{"send", func(b comm.Backend) error { return b.SendTo(p, es, 0, s) }, comm.ErrClosed},
			{"recv", func(b comm.Backend) error { return b.RecvFrom(p, es, 0, s) }, comm.ErrClosed},
			{"register", func(b comm.Backend) error { _, err := b.RegisterBuffer(p, 64); return err }, comm.ErrClosed},
			{"deregister", func(b comm.Backend) error { return b.DeregisterBuffer(1) }, comm.ErrClosed},
			{"symmetric-alloc", func(b comm.Backend) error { _, err := b.SymmetricAlloc(4096); return err }, comm.ErrClosed},
			{"symmetric-free", func(b comm.Backend) error { return b.SymmetricFree(p) }, comm.ErrClosed},
			{"set-add-kernel", func(b comm.Backend) error { return b.SetAddKernel(1) }, comm.ErrClosed},
			{"group-start", func(b comm.Backend) error { return b.GroupStart() }, comm.ErrClosed},
			{"group-end", func(b comm.Backend) error { return b.GroupEnd() }, comm.ErrClosed},
			{"attempt-reconnect", func(b comm.Backend) error { return b.AttemptReconnect(ctx) }, comm.ErrClosed},
			{"close twice", func(b comm.Backend) error { return b.Close() }, comm.ErrClosed},
		}
		if n > 1 {
			after = append(after, badCall{"recv-command", func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, 1) }, comm.ErrClosed})
		}
		for _, c := range after {
			e.expectFailure(t, c.name, func() error { return c.call(b) }, c.want)
		}
		require.False(t, b.IsHealthy(), "a closed backend is not healthy")
		if typed {
			e.closedTyped(t, src.Communicators(), p)
		}
	})
}

// badTyped checks the typed Communicator's argument validation.
func (e *env) badTyped(t *testing.T, c comm.Communicator, p comm.DevicePtr) {
	n := e.n
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"all-reduce negative count", func() error { return c.AllReduce(p, -1, comm.Float32, comm.Sum) }, comm.ErrInvalidSize},
		{"all-reduce invalid type", func() error { return c.AllReduce(p, 1, 99, comm.Sum) }, comm.ErrInvalidType},
		{"all-reduce negative type", func() error { return c.AllReduce(p, 1, -1, comm.Sum) }, comm.ErrInvalidType},
		{"all-reduce invalid op", func() error { return c.AllReduce(p, 1, comm.Float32, 5) }, comm.ErrInvalidOp},
		{"all-reduce pre-mul-sum op of no communicator", func() error { return c.AllReduce(p, 1, comm.Float32, 1<<20) }, comm.ErrInvalidOp},
		{"all-reduce null pointer", func() error { return c.AllReduce(0, 1, comm.Float32, comm.Sum) }, comm.ErrNullPointer},
		{"broadcast root = world size", func() error { return c.Broadcast(p, 1, comm.Int8, n) }, comm.ErrInvalidRank},
		{"broadcast negative root", func() error { return c.Broadcast(p, 1, comm.Int8, -1) }, comm.ErrInvalidRank},
		{"broadcast invalid type", func() error { return c.Broadcast(p, 1, 12, 0) }, comm.ErrInvalidType},
		{"all-gather negative count", func() error { return c.AllGather(p, p, -1, comm.Int32) }, comm.ErrInvalidSize},
		{"all-gather null recv", func() error { return c.AllGather(p, 0, 1, comm.Int32) }, comm.ErrNullPointer},
		{"all-reduce pointer in the null page", func() error { return c.AllReduce(8, 1, comm.Float32, comm.Sum) }, comm.ErrNullPointer},
		{"all-reduce empty, pointer in the null page", func() error { return c.AllReduce(0xff8, 0, comm.Float32, comm.Sum) }, comm.ErrNullPointer},
		{"all-gather recv in the null page", func() error { return c.AllGather(p, 0x40, 1, comm.Int32) }, comm.ErrNullPointer},
		{"send pointer in the null page", func() error { return c.Send(1, 0, comm.Int8, 0, 0) }, comm.ErrNullPointer},
		{"recv pointer in the null page", func() error { return c.Recv(0x10, 4, comm.Int8, 0, 0) }, comm.ErrNullPointer},
		{"reduce-scatter invalid op", func() error { return c.ReduceScatter(p, p, 1, comm.Int32, -1) }, comm.ErrInvalidOp},
		{"reduce-scatter null send", func() error { return c.ReduceScatter(0, p, 1, comm.Int32, comm.Max) }, comm.ErrNullPointer},
		{"send dest = world size", func() error { return c.Send(p, 1, comm.Int8, n, 0) }, comm.ErrInvalidRank},
		{"send invalid type", func() error { return c.Send(p, 1, 42, 0, 0) }, comm.ErrInvalidType},
		{"recv negative src", func() error { return c.Recv(p, 1, comm.Int8, -1, 0) }, comm.ErrInvalidRank},
		{"recv negative count", func() error { return c.Recv(p, -4, comm.Int8, 0, 0) }, comm.ErrInvalidSize},
	}
	for _, tc := range cases {
		e.expectFailure(t, tc.name, tc.call, tc.want)
	}
	e.badCollectives(t, c, p)
}

// closedTyped closes every typed communicator and checks that every call then fails
// with ErrClosed.
func (e *env) closedTyped(t *testing.T, cs []comm.Communicator, p comm.DevicePtr) {
	for _, c := range cs {
		_ = c.Close() // the backend's Close may have closed it already
	}
	c := cs[0]
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
	}{
		{"typed all-reduce", func() error { return c.AllReduce(p, 1, comm.Float32, comm.Sum) }},
		{"typed broadcast", func() error { return c.Broadcast(p, 1, comm.Float32, 0) }},
		{"typed all-gather", func() error { return c.AllGather(p, p, 1, comm.Float32) }},
		{"typed reduce-scatter", func() error { return c.ReduceScatter(p, p, 1, comm.Float32, comm.Sum) }},
		{"typed send", func() error { return c.Send(p, 1, comm.Float32, 0, 0) }},
		{"typed recv", func() error { return c.Recv(p, 1, comm.Float32, 0, 0) }},
		{"typed sync", func() error { return c.Sync(ctx) }},
		{"typed barrier", func() error { return c.Barrier(ctx) }},
		{"typed split", func() error { _, err := c.Split(ctx, 0, 0); return err }},
		{"typed close twice", c.Close},
	}
	for _, tc := range cases {
		e.expectFailure(t, tc.name, tc.call, comm.ErrClosed)
	}
	e.closedCollectives(t, c, p)
}

// expectFailure runs call and requires the sentinel want, no panic and, where the
// instance counts them, no library call.
func (e *env) expectFailure(t *testing.T, name string, call func() error, want error) {
	t.Helper()
	counter, counts := e.count.(CallCounter)
	var before int64
	if counts {
		before = counter.DriverCalls()
	}
	var err error
	require.NotPanics(t, func() { err = call() }, name)
	require.ErrorIs(t, err, want, "%s: got %v", name, err)
	if counts {
		require.Equal(t, before, counter.DriverCalls(), "%s reached the library", name)
	}
}
