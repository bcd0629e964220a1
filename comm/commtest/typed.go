package commtest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ncclgo/ncclgo/comm"
)

// typed runs the Communicator cases: every element type with every reduce op.
func (e *env) typed(t *testing.T, cs []comm.Communicator) {
	require.Len(t, cs, e.n)
	mine := e.ranks()
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
				for _, r := range mine {
					checkBytes(t, dt, expected(op, dt, e.n, 0, count), e.read(t, r, ps[r], count*es), "typed all-reduce %v, rank %d", op, r)
				}

				send := e.buffers(t, count*e.n*es, func(r int) []byte { return inputs(op, dt, e.n, r, 0, count*e.n) })
				recv := e.buffers(t, count*es, nil)
				e.all(t, func(r int) error { return cs[r].ReduceScatter(send[r], recv[r], count, dt, op) })
				sync(t)
				if !e.h.NoOp {
					for _, r := range mine {
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
				for _, r := range mine {
					checkBytes(t, dt, want, e.read(t, r, recv[r], count*es*e.n), "typed all-gather, rank %d", r)
				}
			}

			root := e.n - 1
			ps := e.buffers(t, count*es, func(r int) []byte { return tagged(r, count*es) })
			e.all(t, func(r int) error { return cs[r].Broadcast(ps[r], count, dt, root) })
			sync(t)
			for _, r := range mine {
				checkBytes(t, dt, tagged(root, count*es), e.read(t, r, ps[r], count*es), "typed broadcast from %d, rank %d", root, r)
			}

			// A ring, in one group on every rank (every Communicator has groups).
			in := e.buffers(t, count*es, nil)
			e.all(t, func(r int) error {
				next, prev := (r+1)%e.n, (r+e.n-1)%e.n
				if err := cs[r].GroupStart(); err != nil {
					return err
				}
				errS := cs[r].Send(send[r], count, dt, next, 7)
				errR := cs[r].Recv(in[r], count, dt, prev, 7)
				return errors.Join(errS, errR, cs[r].GroupEnd())
			})
			sync(t)
			if !e.h.NoOp {
				for _, r := range mine {
					checkBytes(t, dt, tagged((r+e.n-1)%e.n, count*es), e.read(t, r, in[r], count*es), "typed send/recv ring, rank %d", r)
				}
			}
		})
	}
	t.Run("barrier", func(t *testing.T) {
		e.all(t, func(r int) error { return cs[r].Barrier(ctx) })
	})
	t.Run("split", func(t *testing.T) { e.split(t, ctx, cs) })
	t.Run("group-scope-across-communicators", func(t *testing.T) { e.typedGroupScope(t, ctx, cs) })
}

// typedGroupScope checks that a group opened on one communicator covers the operations
// the same goroutine issues on another (NCCL keeps group state per thread, for every
// communicator): inside the parent's group, a sub-communicator's all-reduce is only
// recorded and its Sync refuses to wait (ErrGroupOpen) instead of returning before the
// operation was launched; after the parent's GroupEnd, Sync sees the result.
func (e *env) typedGroupScope(t *testing.T, ctx context.Context, cs []comm.Communicator) {
	subs := make([]comm.Communicator, e.n)
	errs := e.try(t, func(r int) error {
		s, err := cs[r].Split(ctx, 0, r)
		subs[r] = s
		return err
	})
	if e.skipUnsupported(t, errs, CapSplit, "split") {
		return
	}
	for r := range e.n {
		t.Cleanup(func() { _ = subs[r].Close() })
	}
	const count = 9
	ps := e.buffers(t, 4*count, func(r int) []byte { return inputs(comm.Sum, comm.Int32, e.n, r, 0, count) })
	e.all(t, func(r int) error {
		if err := cs[r].GroupStart(); err != nil {
			return err
		}
		errOp := subs[r].AllReduce(ps[r], count, comm.Int32, comm.Sum)
		errSync := subs[r].Sync(ctx)
		errEnd := cs[r].GroupEnd()
		if errOp != nil || errEnd != nil {
			return errors.Join(errOp, errEnd)
		}
		if !errors.Is(errSync, comm.ErrGroupOpen) {
			return fmt.Errorf("rank %d: Sync of a sub-communicator inside the parent's group returned %v, want ErrGroupOpen", r, errSync)
		}
		return subs[r].Sync(ctx)
	})
	if e.h.NoOp {
		return
	}
	for r := range e.n {
		checkBytes(t, comm.Int32, expected(comm.Sum, comm.Int32, e.n, 0, count), e.read(t, r, ps[r], 4*count), "sub-communicator all-reduce grouped by the parent, rank %d", r)
	}
}

// skipUnsupported reports whether every rank answered ErrUnsupported, skipping the test
// (or failing it when the harness requires the capability); otherwise it requires every
// call to have succeeded.
func (e *env) skipUnsupported(t *testing.T, errs []error, c Capability, op string) bool {
	t.Helper()
	n := 0
	for _, err := range errs {
		if errors.Is(err, comm.ErrUnsupported) {
			n++
		}
	}
	if n == len(errs) {
		if e.h.requires(c) {
			t.Fatalf("%s: the harness requires %s, but every rank answered ErrUnsupported: %v", op, c, errs[0])
		}
		t.Skipf("%s is unsupported by this backend (ErrUnsupported on every rank) and not required by the harness", c)
		return true
	}
	for r, err := range errs {
		require.NoError(t, err, "%s on rank %d", op, r)
	}
	return false
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
	mine := e.ranks()
	if errors.Is(errs[mine[0]], comm.ErrUnsupported) {
		for _, r := range mine {
			require.ErrorIs(t, errs[r], comm.ErrUnsupported, "rank %d", r)
			require.Nil(t, subs[r])
		}
		if e.h.requires(CapSplit) {
			t.Fatalf("split: the harness requires %s, but every rank answered ErrUnsupported: %v", CapSplit, errs[0])
		}
		t.Skip("the communicator cannot split (ErrUnsupported) and the harness does not require it")
	}
	for _, r := range mine {
		require.NoError(t, errs[r], "rank %d", r)
		t.Cleanup(func() { _ = subs[r].Close() })
	}
	size := func(color int) int { return (e.n - color + 1) / 2 }
	for _, r := range mine {
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
	for _, r := range mine {
		want := 0
		for q := r % 2; q < e.n; q += 2 {
			want += q
		}
		got, err := DecodeValues(comm.Int32, e.read(t, r, ps[r], 4))
		require.NoError(t, err)
		require.Equal(t, float64(want), got[0], "sum over rank %d's half", r)
	}
}
