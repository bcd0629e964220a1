package nccl

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
)

// countingCore is a user backend's Core that counts the calls reaching it.
type countingCore struct {
	rank, world int
	calls       atomic.Int32
}

func (c *countingCore) AllReduce(comm.DevicePtr, int) error { c.calls.Add(1); return nil }
func (c *countingCore) AllGather(comm.DevicePtr, comm.DevicePtr, int) error {
	c.calls.Add(1)
	return nil
}
func (c *countingCore) ReduceScatter(comm.DevicePtr, comm.DevicePtr, int) error {
	c.calls.Add(1)
	return nil
}
func (c *countingCore) Broadcast(comm.DevicePtr, int, int) error { c.calls.Add(1); return nil }
func (c *countingCore) Barrier() error                           { c.calls.Add(1); return nil }
func (c *countingCore) SendTo(comm.DevicePtr, int, int, comm.Stream) error {
	c.calls.Add(1)
	return nil
}
func (c *countingCore) RecvFrom(comm.DevicePtr, int, int, comm.Stream) error {
	c.calls.Add(1)
	return nil
}
func (c *countingCore) Rank() int      { return c.rank }
func (c *countingCore) WorldSize() int { return c.world }

// impl builds one backend under test and tells how many calls reached the layer below.
type impl struct {
	name  string
	new   func(t *testing.T, rank, world int) (b comm.Backend, reached func() int)
	world int // 0: any world
}

func newFakeNCCL(t *testing.T, f *fakegpu.Driver, rank, world int, opts ...Option) *Backend {
	t.Helper()
	b, err := newNCCL(context.Background(), f, comm.UniqueID{9}, rank, world, newConfig(append([]Option{bf16}, opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

var impls = []impl{
	{name: "single", world: 1, new: func(t *testing.T, rank, world int) (comm.Backend, func() int) {
		s, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
		require.NoError(t, err)
		return s, func() int { return 0 }
	}},
	{name: "validated-base", new: func(t *testing.T, rank, world int) (comm.Backend, func() int) {
		core := &countingCore{rank: rank, world: world}
		b, err := comm.Validate(comm.Base{Core: core}, comm.WithElementType(comm.BFloat16))
		require.NoError(t, err)
		return b, func() int { return int(core.calls.Load()) }
	}},
	{name: "nccl", new: func(t *testing.T, rank, world int) (comm.Backend, func() int) {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, rank, world)
		f.Log()
		return b, func() int { return len(f.Named(fakegpu.NcclCalls...)) }
	}},
}

type badCase struct {
	name  string
	setup func(t *testing.T, b comm.Backend)
	call  func(b comm.Backend) error
	undo  func(b comm.Backend)
	want  error
	// tearsDown: the call legitimately reaches the layer below (Close still closes).
	tearsDown bool
	// ownValues: the message carries a value each backend chooses (a handle).
	ownValues bool
}

const p comm.DevicePtr = 0x10000

// badInputs lists every method with every kind of invalid input, for rank 0 of a world
// of world ranks with a bfloat16 element type.
func badInputs(world int) []badCase {
	ctx := context.Background()
	group := func(t *testing.T, b comm.Backend) { require.NoError(t, b.GroupStart()) }
	ungroup := func(b comm.Backend) { _ = b.GroupEnd() }
	cases := []badCase{
		{name: "all-reduce negative bytes", call: func(b comm.Backend) error { return b.AllReduce(p, -2) }, want: comm.ErrInvalidSize},
		{name: "all-reduce odd bytes", call: func(b comm.Backend) error { return b.AllReduce(p, 3) }, want: comm.ErrInvalidSize},
		{name: "all-reduce null ptr", call: func(b comm.Backend) error { return b.AllReduce(0, 4) }, want: comm.ErrNullPointer},
		{name: "all-reduce misaligned ptr", call: func(b comm.Backend) error { return b.AllReduce(p+1, 4) }, want: comm.ErrMisaligned},
		{name: "all-reduce-async misaligned ptr", call: func(b comm.Backend) error { return b.AllReduceAsync(p+3, 4, 0) }, want: comm.ErrMisaligned},
		{name: "reduce-scatter misaligned send", call: func(b comm.Backend) error { return b.ReduceScatter(p+1, p, 8) }, want: comm.ErrMisaligned},
		{name: "reduce-scatter misaligned recv", call: func(b comm.Backend) error { return b.ReduceScatter(p, p+1, 8) }, want: comm.ErrMisaligned},
		{name: "all-reduce-async negative bytes", call: func(b comm.Backend) error { return b.AllReduceAsync(p, -2, 0) }, want: comm.ErrInvalidSize},
		{name: "all-reduce-async odd bytes", call: func(b comm.Backend) error { return b.AllReduceAsync(p, 5, 0) }, want: comm.ErrInvalidSize},
		{name: "all-reduce-async null ptr", call: func(b comm.Backend) error { return b.AllReduceAsync(0, 4, 0) }, want: comm.ErrNullPointer},
		{name: "all-reduce-async in group", setup: group, undo: ungroup, call: func(b comm.Backend) error { return b.AllReduceAsync(p, 4, 0) }, want: comm.ErrGroupOpen},
		{name: "all-gather negative bytes", call: func(b comm.Backend) error { return b.AllGather(p, p, -1) }, want: comm.ErrInvalidSize},
		{name: "all-gather null send", call: func(b comm.Backend) error { return b.AllGather(0, p, 8) }, want: comm.ErrNullPointer},
		{name: "all-gather null recv", call: func(b comm.Backend) error { return b.AllGather(p, 0, 8) }, want: comm.ErrNullPointer},
		{name: "reduce-scatter negative bytes", call: func(b comm.Backend) error { return b.ReduceScatter(p, p, -4) }, want: comm.ErrInvalidSize},
		{name: "reduce-scatter odd bytes", call: func(b comm.Backend) error { return b.ReduceScatter(p, p, 7) }, want: comm.ErrInvalidSize},
		{name: "reduce-scatter null send", call: func(b comm.Backend) error { return b.ReduceScatter(0, p, 8) }, want: comm.ErrNullPointer},
		{name: "reduce-scatter null recv", call: func(b comm.Backend) error { return b.ReduceScatter(p, 0, 8) }, want: comm.ErrNullPointer},
		{name: "broadcast negative bytes", call: func(b comm.Backend) error { return b.Broadcast(p, -1, 0) }, want: comm.ErrInvalidSize},
		{name: "broadcast null ptr", call: func(b comm.Backend) error { return b.Broadcast(0, 1, 0) }, want: comm.ErrNullPointer},
		{name: "broadcast root negative", call: func(b comm.Backend) error { return b.Broadcast(p, 4, -1) }, want: comm.ErrInvalidRank},
		{name: "broadcast root world", call: func(b comm.Backend) error { return b.Broadcast(p, 4, world) }, want: comm.ErrInvalidRank},
		{name: "send negative bytes", call: func(b comm.Backend) error { return b.SendTo(p, -1, 0, 0) }, want: comm.ErrInvalidSize},
		{name: "send null ptr", call: func(b comm.Backend) error { return b.SendTo(0, 16, 0, 0) }, want: comm.ErrNullPointer},
		{name: "send dest negative", call: func(b comm.Backend) error { return b.SendTo(p, 16, -1, 0) }, want: comm.ErrInvalidRank},
		{name: "send dest world", call: func(b comm.Backend) error { return b.SendTo(p, 16, world, 0) }, want: comm.ErrInvalidRank},
		{name: "recv negative bytes", call: func(b comm.Backend) error { return b.RecvFrom(p, -1, 0, 0) }, want: comm.ErrInvalidSize},
		{name: "recv null ptr", call: func(b comm.Backend) error { return b.RecvFrom(0, 16, 0, 0) }, want: comm.ErrNullPointer},
		{name: "recv src negative", call: func(b comm.Backend) error { return b.RecvFrom(p, 16, -1, 0) }, want: comm.ErrInvalidRank},
		{name: "recv src world", call: func(b comm.Backend) error { return b.RecvFrom(p, 16, world, 0) }, want: comm.ErrInvalidRank},
		{name: "recv-command root is self", call: func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, 0) }, want: comm.ErrInvalidRank},
		{name: "recv-command root negative", call: func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, -1) }, want: comm.ErrInvalidRank},
		{name: "recv-command root world", call: func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, world) }, want: comm.ErrInvalidRank},
		{name: "recv-command null ptr", call: func(b comm.Backend) error { return b.RecvCommandU32(ctx, 0, world-1) }, want: comm.ErrNullPointer},
		{name: "recv-command in group", setup: group, undo: ungroup, call: func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, world-1) }, want: comm.ErrGroupOpen},
		{name: "register zero bytes", call: func(b comm.Backend) error { _, err := b.RegisterBuffer(p, 0); return err }, want: comm.ErrInvalidSize},
		{name: "register negative bytes", call: func(b comm.Backend) error { _, err := b.RegisterBuffer(p, -8); return err }, want: comm.ErrInvalidSize},
		{name: "register null ptr", call: func(b comm.Backend) error { _, err := b.RegisterBuffer(0, 8); return err }, want: comm.ErrNullPointer},
		{name: "deregister unknown handle", call: func(b comm.Backend) error { return b.DeregisterBuffer(12345) }, want: comm.ErrUnknownHandle},
		{name: "deregister twice",
			setup: func(t *testing.T, b comm.Backend) {
				h, err := b.RegisterBuffer(p, 64)
				require.NoError(t, err)
				require.NoError(t, b.DeregisterBuffer(h))
			},
			call: func(b comm.Backend) error { return b.DeregisterBuffer(lastHandle(b)) }, want: comm.ErrUnknownHandle, ownValues: true},
		{name: "symmetric-alloc zero bytes", call: func(b comm.Backend) error { _, err := b.SymmetricAlloc(0); return err }, want: comm.ErrInvalidSize},
		{name: "symmetric-alloc negative bytes", call: func(b comm.Backend) error { _, err := b.SymmetricAlloc(-1); return err }, want: comm.ErrInvalidSize},
		{name: "symmetric-alloc in group", setup: group, undo: ungroup, call: func(b comm.Backend) error { _, err := b.SymmetricAlloc(4096); return err }, want: comm.ErrGroupOpen},
		{name: "symmetric-free null", call: func(b comm.Backend) error { return b.SymmetricFree(0) }, want: comm.ErrNullPointer},
		{name: "symmetric-free unknown", call: func(b comm.Backend) error { return b.SymmetricFree(0x7000) }, want: comm.ErrUnknownPointer},
		{name: "symmetric-free twice",
			setup: func(t *testing.T, b comm.Backend) {
				q, err := b.SymmetricAlloc(4096)
				if errors.Is(err, comm.ErrUnsupported) {
					return // the second free below is then the first, of an unknown pointer
				}
				require.NoError(t, err)
				require.NoError(t, b.SymmetricFree(q))
				freed[b] = q
			},
			call: func(b comm.Backend) error { return b.SymmetricFree(freedPtr(b)) }, want: comm.ErrUnknownPointer},
		{name: "set-add-kernel null", call: func(b comm.Backend) error { return b.SetAddKernel(0) }, want: comm.ErrNullPointer},
		{name: "group-end without start", call: func(b comm.Backend) error { return b.GroupEnd() }, want: comm.ErrGroupNotOpen},
		{name: "group-end once too often",
			setup: func(t *testing.T, b comm.Backend) {
				require.NoError(t, b.GroupStart())
				require.NoError(t, b.GroupStart())
				require.NoError(t, b.GroupEnd())
				require.NoError(t, b.GroupEnd())
			},
			call: func(b comm.Backend) error { return b.GroupEnd() }, want: comm.ErrGroupNotOpen},
		{name: "attempt-reconnect in group", setup: group, undo: ungroup, call: func(b comm.Backend) error { return b.AttemptReconnect(ctx) }, want: comm.ErrGroupOpen},
		{name: "close with group open", setup: group, call: func(b comm.Backend) error { return b.Close() }, want: comm.ErrGroupOpen, tearsDown: true},
		{name: "close twice", setup: func(t *testing.T, b comm.Backend) { require.NoError(t, b.Close()) },
			call: func(b comm.Backend) error { return b.Close() }, want: comm.ErrClosed},
	}
	if world > 1 {
		cases = append(cases,
			badCase{name: "all-gather overflow", call: func(b comm.Backend) error { return b.AllGather(p, p, math.MaxInt/world+1) }, want: comm.ErrInvalidSize},
			badCase{name: "reduce-scatter overflow", call: func(b comm.Backend) error { return b.ReduceScatter(p, p, (math.MaxInt/world+2)&^1) }, want: comm.ErrInvalidSize},
		)
	}
	return cases
}

// The "twice" cases need the handle or pointer their setup released.
var freed = map[comm.Backend]comm.DevicePtr{}

func freedPtr(b comm.Backend) comm.DevicePtr {
	if q, ok := freed[b]; ok {
		return q
	}
	return 0x3000 // where the fake driver's first ncclMemAlloc lands, so messages match
}

func lastHandle(b comm.Backend) comm.BufferHandle {
	if n, ok := b.(*Backend); ok {
		return n.nextHandle
	}
	return 0
}

// TestBadInputFailsAlikeOnEveryBackend checks every method with every invalid input on
// Single, a validated user backend and the NCCL backend: the same sentinel, the same
// message on every backend, and nothing reaches the layer below.
func TestBadInputFailsAlikeOnEveryBackend(t *testing.T) {
	for _, world := range []int{1, 4} {
		for _, tc := range badInputs(world) {
			t.Run(tc.name, func(t *testing.T) {
				msgs := map[string]string{}
				for _, im := range impls {
					if im.world != 0 && im.world != world {
						continue
					}
					b, reached := im.new(t, 0, world)
					if tc.setup != nil {
						tc.setup(t, b)
					}
					before := reached()
					var err error
					require.NotPanics(t, func() { err = tc.call(b) }, im.name)
					require.Error(t, err, im.name)
					assert.ErrorIs(t, err, tc.want, im.name)
					var ae *comm.ArgError
					assert.ErrorAs(t, err, &ae, im.name)
					if !tc.tearsDown {
						assert.Equal(t, before, reached(), "%s: bad input reached the layer below", im.name)
					}
					if tc.undo != nil {
						tc.undo(b)
					}
					msgs[im.name] = err.Error()
				}
				if tc.ownValues {
					return
				}
				var first string
				for name, m := range msgs {
					if first == "" {
						first = m
						continue
					}
					assert.Equal(t, first, m, "%s says something else", name)
				}
			})
		}
	}
}

// TestMessagesSayWhatWasWrong pins the message format of a few argument errors.
func TestMessagesSayWhatWasWrong(t *testing.T) {
	s, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	tests := []struct {
		call func() error
		want string
	}{
		{func() error { return s.AllReduce(p, -3) }, "all-reduce on rank 0: bytes -3: invalid size: negative"},
		{func() error { return s.AllReduce(p, 5) }, "all-reduce on rank 0: bytes 5: invalid size: not a multiple of 2 (bfloat16)"},
		{func() error { return s.Broadcast(p, 4, 2) }, "broadcast on rank 0: root 2: invalid rank: world size is 1"},
		{func() error { return s.SendTo(0, 16, 0, 0) }, "send on rank 0: ptr 0x0: null pointer: with 16 bytes"},
		{func() error { return s.DeregisterBuffer(7) }, "deregister-buffer on rank 0: handle 7: unknown buffer handle: not returned by register-buffer or already deregistered"},
		{func() error { return s.GroupEnd() }, "group-end on rank 0: group depth 0: no group open: group-end without group-start"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			assert.EqualError(t, tc.call(), tc.want)
		})
	}
}

// everyCall calls every Backend method with valid arguments for rank 0 of world ranks.
func everyCall(world int) map[string]func(b comm.Backend) error {
	ctx := context.Background()
	return map[string]func(b comm.Backend) error{
		"AllReduce":        func(b comm.Backend) error { return b.AllReduce(p, 8) },
		"AllGather":        func(b comm.Backend) error { return b.AllGather(p, p, 8) },
		"ReduceScatter":    func(b comm.Backend) error { return b.ReduceScatter(p, p, 8) },
		"Broadcast":        func(b comm.Backend) error { return b.Broadcast(p, 8, 0) },
		"Barrier":          func(b comm.Backend) error { return b.Barrier() },
		"SendTo":           func(b comm.Backend) error { return b.SendTo(p, 8, 0, 0) },
		"RecvFrom":         func(b comm.Backend) error { return b.RecvFrom(p, 8, 0, 0) },
		"RecvCommandU32":   func(b comm.Backend) error { return b.RecvCommandU32(ctx, p, world-1) },
		"AllReduceAsync":   func(b comm.Backend) error { return b.AllReduceAsync(p, 8, 0) },
		"RegisterBuffer":   func(b comm.Backend) error { _, err := b.RegisterBuffer(p, 8); return err },
		"DeregisterBuffer": func(b comm.Backend) error { return b.DeregisterBuffer(0) },
		"SymmetricAlloc":   func(b comm.Backend) error { _, err := b.SymmetricAlloc(4096); return err },
		"SymmetricFree":    func(b comm.Backend) error { return b.SymmetricFree(p) },
		"SetAddKernel":     func(b comm.Backend) error { return b.SetAddKernel(1) },
		"GroupStart":       func(b comm.Backend) error { return b.GroupStart() },
		"GroupEnd":         func(b comm.Backend) error { return b.GroupEnd() },
		"AttemptReconnect": func(b comm.Backend) error { return b.AttemptReconnect(ctx) },
		"Close":            func(b comm.Backend) error { return b.Close() },
	}
}

// TestEveryCallAfterCloseFailsWithErrClosed checks that Close ends every method on every
// backend, without reaching the layer below.
func TestEveryCallAfterCloseFailsWithErrClosed(t *testing.T) {
	for _, im := range impls {
		world := 2
		if im.world != 0 {
			world = im.world
		}
		for name, call := range everyCall(world) {
			t.Run(im.name+"/"+name, func(t *testing.T) {
				b, reached := im.new(t, 0, world)
				require.NoError(t, b.Close())
				before := reached()
				err := call(b)
				assert.ErrorIs(t, err, comm.ErrClosed)
				assert.Equal(t, before, reached())
				assert.False(t, b.IsHealthy())
				assert.Equal(t, 0, b.Rank())
				assert.Equal(t, world, b.WorldSize())
			})
		}
	}
}

// TestZeroBytesIsValid checks the documented meaning of zero bytes: every data
// operation accepts it, with or without a pointer.
func TestZeroBytesIsValid(t *testing.T) {
	calls := map[string]func(b comm.Backend) error{
		"AllReduce":      func(b comm.Backend) error { return b.AllReduce(0, 0) },
		"AllReduceAsync": func(b comm.Backend) error { return b.AllReduceAsync(0, 0, 0) },
		"AllGather":      func(b comm.Backend) error { return b.AllGather(0, 0, 0) },
		"ReduceScatter":  func(b comm.Backend) error { return b.ReduceScatter(0, 0, 0) },
		"Broadcast":      func(b comm.Backend) error { return b.Broadcast(0, 0, 0) },
		"SendTo":         func(b comm.Backend) error { return b.SendTo(0, 0, 0, 0) },
		"RecvFrom":       func(b comm.Backend) error { return b.RecvFrom(p, 0, 0, 0) },
	}
	for _, im := range impls {
		for name, call := range calls {
			t.Run(im.name+"/"+name, func(t *testing.T) {
				b, _ := im.new(t, 0, 1)
				assert.NoError(t, call(b))
			})
		}
	}
}

// TestValidateRejectsBadBackends checks Validate's own argument checks.
func TestValidateRejectsBadBackends(t *testing.T) {
	tests := []struct {
		name string
		b    comm.Backend
		opts []comm.Option
		want error
	}{
		{"nil backend", nil, nil, nil},
		{"zero world", comm.Base{Core: &countingCore{rank: 0, world: 0}}, nil, comm.ErrInvalidSize},
		{"rank past world", comm.Base{Core: &countingCore{rank: 2, world: 2}}, nil, comm.ErrInvalidRank},
		{"bad element type", comm.Base{Core: &countingCore{rank: 0, world: 2}}, []comm.Option{comm.WithElementType(comm.DType(99))}, comm.ErrInvalidType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := comm.Validate(tc.b, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, b)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
		})
	}
	s, err := comm.NewSingle(comm.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	v, err := comm.Validate(s)
	require.NoError(t, err)
	assert.Same(t, s, v, "comm's own backends are already validated")
}

// TestElementTypeSetsTheReductionGranule checks that reductions and reduce-scatter use
// the configured element type, while byte-moving operations take any size.
func TestElementTypeSetsTheReductionGranule(t *testing.T) {
	for _, dt := range []comm.DType{comm.Int8, comm.Float16, comm.BFloat16, comm.Float32, comm.Float64, comm.Float8E4M3} {
		t.Run(dt.String(), func(t *testing.T) {
			s, err := comm.NewSingle(comm.WithElementType(dt))
			require.NoError(t, err)
			n := dt.Size()
			assert.NoError(t, s.AllReduce(p, 3*n))
			assert.NoError(t, s.ReduceScatter(p, p, 3*n))
			assert.NoError(t, s.Broadcast(p, 3, 0))
			assert.NoError(t, s.AllGather(p, p, 3))
			if n > 1 {
				assert.ErrorIs(t, s.AllReduce(p, 3*n+1), comm.ErrInvalidSize)
				assert.ErrorIs(t, s.ReduceScatter(p, p, 3*n+1), comm.ErrInvalidSize)
			}
		})
	}
}
