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
// operation was launched; after the parent's GroupEnd, Sync sees the result. A harness
// that states it lacks CapGroupScope (groups that defer nothing: the MPI Communicator,
// whose collectives complete when they return) gets the opposite check: inside the
// parent's group the sub-communicator's all-reduce has completed and Sync succeeds.
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
	for _, r := range e.ranks() {
		t.Cleanup(func() { _ = subs[r].Close() })
	}
	const count = 9
	ps := e.buffers(t, 4*count, func(r int) []byte { return inputs(comm.Sum, comm.Int32, e.n, r, 0, count) })
	deferred := e.lacks == nil || !e.lacks(CapGroupScope)
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
		if !deferred {
			if errSync != nil {
				return fmt.Errorf("rank %d: Sync of a sub-communicator inside the parent's group returned %v; the harness lacks %s, so groups defer nothing", r, errSync, CapGroupScope)
			}
			return nil
		}
		if !errors.Is(errSync, comm.ErrGroupOpen) {
			return fmt.Errorf("rank %d: Sync of a sub-communicator inside the parent's group returned %v, want ErrGroupOpen", r, errSync)
		}
		return subs[r].Sync(ctx)
	})
	if e.h.NoOp {
		return
	}
	for _, r := range e.ranks() {
		checkBytes(t, comm.Int32, expected(comm.Sum, comm.Int32, e.n, 0, count), e.read(t, r, ps[r], 4*count), "sub-communicator all-reduce grouped by the parent, rank %d", r)
	}
}

// skipUnsupported reports whether every rank this process runs answered
// ErrUnsupported (errs indexed by rank; a shorter errs is checked whole), skipping the
// test (see unsupported); otherwise it requires every call to have succeeded, and fails
// when the harness states that it lacks c.
func (e *env) skipUnsupported(t *testing.T, errs []error, c Capability, op string) bool {
	t.Helper()
	mine := e.ranks()
	if len(errs) != e.n {
		mine = make([]int, len(errs))
		for i := range mine {
			mine[i] = i
		}
	}
	n := 0
	for _, r := range mine {
		if errors.Is(errs[r], comm.ErrUnsupported) {
			n++
		}
	}
	if n == len(mine) {
		e.unsupported(t, c, fmt.Sprintf("every rank answered ErrUnsupported (%s): %v", op, errs[mine[0]]))
		return true
	}
	for _, r := range mine {
		require.NoError(t, errs[r], "%s on rank %d", op, r)
	}
	if e.lacks != nil && e.lacks(c) {
		t.Fatalf("%s: the harness states that it lacks %s, but %s succeeded", e.h.Name, c, op)
	}
	return false
}

// unsupported ends a case whose capability c the instance does not have (why says how
// it showed): it fails when the harness requires c, or when the harness must state
// what it lacks (CommHarness.Lacks) and does not list c; otherwise it skips.
func (e *env) unsupported(t *testing.T, c Capability, why string) {
	t.Helper()
	if e.h.requires(c) {
		t.Fatalf("the harness requires %s, but %s", c, why)
	}
	if e.lacks != nil {
		if !e.lacks(c) {
			t.Fatalf("%s: %s, and the harness does not state that it lacks %s (CommHarness.Lacks)", e.h.Name, why, c)
		}
		t.Skipf("%s: lacked, as the harness states (%s)", c, why)
	}
	t.Skipf("%s is unsupported by this backend (%s) and not required by the harness", c, why)
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
	}
	e.skipUnsupported(t, errs, CapSplit, "split")
	for _, r := range mine {
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
