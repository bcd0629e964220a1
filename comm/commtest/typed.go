package commtest

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

// typed runs the Communicator cases: every element type with every reduce op.
func (e *env) typed(t *testing.T, cs []comm.Communicator) {
	require.Len(t, cs, e.n)
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	sync := func(t *testing.T) {
		t.Helper()
		e.all(t, func(r int) error { return cs[r].Sync(ctx) })
	}
	for _, dt := range allTypes {
		es := dt.Size()
		t.Run(dt.String(), func(t *testing.T) {
			for _, op := range allOps {
				const count = 6
				ps := e.buffers(t, count*es, func(r int) []byte { return inputs(op, dt, e.n, r, 0, count) })
				e.all(t, func(r int) error { return cs[r].AllReduce(ps[r], count, dt, op) })
				sync(t)
				for r := range e.n {
					checkBytes(t, dt, expected(op, dt, e.n, 0, count), e.read(t, r, ps[r], count*es), "typed all-reduce %v, rank %d", op, r)
				}

				send := e.buffers(t, count*e.n*es, func(r int) []byte { return inputs(op, dt, e.n, r, 0, count*e.n) })
				recv := e.buffers(t, count*es, nil)
				e.all(t, func(r int) error { return cs[r].ReduceScatter(send[r], recv[r], count, dt, op) })
				sync(t)
				if !e.h.NoOp {
					for r := range e.n {
						checkBytes(t, dt, expected(op, dt, e.n, r*count, count), e.read(t, r, recv[r], count*es), "typed reduce-scatter %v, rank %d", op, r)
					}
				}
			}

			e.typedCollectives(t, cs, dt, sync)
			e.preMulSum(t, cs, dt, sync)

			const count = 5
			send := e.buffers(t, count*es, func(r int) []byte { return tagged(r, count*es) })
			recv := e.buffers(t, count*es*e.n, nil)
			e.all(t, func(r int) error { return cs[r].AllGather(send[r], recv[r], count, dt) })
			sync(t)
			if !e.h.NoOp {
				var want []byte
				for r := range e.n {
					want = append(want, tagged(r, count*es)...)
				}
				for r := range e.n {
					checkBytes(t, dt, want, e.read(t, r, recv[r], count*es*e.n), "typed all-gather, rank %d", r)
				}
			}

			root := e.n - 1
			ps := e.buffers(t, count*es, func(r int) []byte { return tagged(r, count*es) })
			e.all(t, func(r int) error { return cs[r].Broadcast(ps[r], count, dt, root) })
			sync(t)
			for r := range e.n {
				checkBytes(t, dt, tagged(root, count*es), e.read(t, r, ps[r], count*es), "typed broadcast from %d, rank %d", root, r)
			}

			// A ring: in one group where the communicator has groups; otherwise even
			// ranks send first and odd ranks receive first, so that no send waits for a
			// receive queued behind another send.
			in := e.buffers(t, count*es, nil)
			e.all(t, func(r int) error {
				next, prev := (r+1)%e.n, (r+e.n-1)%e.n
				if g, ok := cs[r].(grouper); ok {
					if err := g.GroupStart(); err != nil {
						return err
					}
					errS := cs[r].Send(send[r], count, dt, next, 7)
					errR := cs[r].Recv(in[r], count, dt, prev, 7)
					return errors.Join(errS, errR, g.GroupEnd())
				}
				if r%2 == 0 {
					if err := cs[r].Send(send[r], count, dt, next, 7); err != nil {
						return err
					}
					return cs[r].Recv(in[r], count, dt, prev, 7)
				}
				if err := cs[r].Recv(in[r], count, dt, prev, 7); err != nil {
					return err
				}
				return cs[r].Send(send[r], count, dt, next, 7)
			})
			sync(t)
			if !e.h.NoOp {
				for r := range e.n {
					checkBytes(t, dt, tagged((r+e.n-1)%e.n, count*es), e.read(t, r, in[r], count*es), "typed send/recv ring, rank %d", r)
				}
			}
		})
	}
	t.Run("barrier", func(t *testing.T) {
		e.all(t, func(r int) error { return cs[r].Barrier(ctx) })
	})
	t.Run("split", func(t *testing.T) { e.split(t, ctx, cs) })
}

// grouper is a Communicator with NCCL-style groups (comm.NCCLCommunicator).
type grouper interface {
	GroupStart() error
	GroupEnd() error
}

// split splits the world into even and odd ranks, ordered by descending rank, and
// all-reduces in each half.
func (e *env) split(t *testing.T, ctx context.Context, cs []comm.Communicator) {
	subs := make([]comm.Communicator, e.n)
	errs := e.try(t, func(r int) error {
		s, err := cs[r].Split(ctx, r%2, -r)
		subs[r] = s
		return err
	})
	if errors.Is(errs[0], comm.ErrUnsupported) {
		for r, err := range errs {
			require.ErrorIs(t, err, comm.ErrUnsupported, "rank %d", r)
			require.Nil(t, subs[r])
		}
		t.Skip("the communicator cannot split (ErrUnsupported)")
	}
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = subs[r].Close() })
	}
	size := func(color int) int { return (e.n - color + 1) / 2 }
	for r := range e.n {
		require.Equal(t, size(r%2), subs[r].WorldSize(), "rank %d's half", r)
		require.Equal(t, (e.n-1-r)/2, subs[r].Rank(), "rank %d's new rank (key = -rank)", r)
	}
	ps := e.buffers(t, 4, func(r int) []byte { b, _ := EncodeValues(comm.Int32, []float64{float64(r)}); return b })
	e.all(t, func(r int) error {
		if err := subs[r].AllReduce(ps[r], 1, comm.Int32, comm.Sum); err != nil {
			return err
		}
		return subs[r].Sync(ctx)
	})
	for r := range e.n {
		want := 0
		for q := r % 2; q < e.n; q += 2 {
			want += q
		}
		got, err := DecodeValues(comm.Int32, e.read(t, r, ps[r], 4))
		require.NoError(t, err)
		require.Equal(t, float64(want), got[0], "sum over rank %d's half", r)
	}
}
