package mpi

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/guardtest"
)

// TestMPIAllReduceFastPathMatchesChecks checks that AllReduce's one-test fast path
// (typedReduceValid) accepts only what its checks one by one (allReduceChecks:
// typedReduce, then MPI's int count) accept, with the same size, and every valid input
// of a count up to fastCount and one of comm's operators; and that AllReduce fails
// every rejected input with exactly allReduceChecks's error, before any MPI call (the
// communicator has no MPI: a call reaching the lock would crash).
func TestMPIAllReduceFastPathMatchesChecks(t *testing.T) {
	guardtest.ForTypedReduceInputs(func(name string, g *core.Guard, ptr comm.DevicePtr, count int, dt comm.DType, op comm.ReduceOp) {
		c := &Communicator{g: g, rank: 0, world: 2}
		bytes, ok := c.g.TypedReduceValid(ptr, count, dt, op)
		want, err := c.allReduceChecks(ptr, count, dt, op)
		if guardtest.AgreeFast(t, name, bytes, ok, want, err, count, op) {
			guardtest.Same(t, err, c.AllReduce(ptr, count, dt, op), name)
		}
	})
	// The count MPI's int cannot carry fails as MPI's, after typedReduce passed.
	c := &Communicator{g: guardtest.NewTypedGuard(false)}
	err := c.AllReduce(4096, math.MaxInt32+1, comm.Float32, comm.Sum)
	assert.ErrorIs(t, err, comm.ErrInvalidSize)
	assert.ErrorContains(t, err, "above MPI's int count")
}

// TestMPILockFailsWhenFinalized checks the process lock's two outcomes: taken, with the
// call counted, while MPI runs; released again, with ErrClosed, once it was finalised.
func TestMPILockFailsWhenFinalized(t *testing.T) {
	c := &Communicator{p: &mpiProcess{}, mu: new(sync.Mutex), rank: 3}
	require.NoError(t, c.lock(core.OpAllReduce))
	assert.False(t, c.mu.TryLock(), "the process lock is held")
	assert.Equal(t, int64(1), c.calls)
	c.mu.Unlock()

	c.p.finalized.Store(true)
	err := c.lock(core.OpAllReduce)
	var ae *comm.ArgError
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.ErrorIs(t, err, comm.ErrClosed)
	assert.Equal(t, 3, ae.Value)
	assert.Contains(t, err.Error(), "mpi was finalized")
	assert.Equal(t, int64(1), c.calls, "a failed lock counts no call")
	assert.True(t, c.mu.TryLock(), "the process lock is released")
	c.mu.Unlock()
}
