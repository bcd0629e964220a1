package comm

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMPIAllReduceFastPathMatchesChecks checks that AllReduce's one-test fast path
// (typedReduceValid) accepts only what its checks one by one (allReduceChecks:
// typedReduce, then MPI's int count) accept, with the same size, and every valid input
// of a count up to fastCount and one of comm's operators; and that AllReduce fails
// every rejected input with exactly allReduceChecks's error, before any MPI call (the
// communicator has no MPI: a call reaching the lock would crash).
func TestMPIAllReduceFastPathMatchesChecks(t *testing.T) {
	forTypedReduceInputs(func(name string, g *guard, ptr DevicePtr, count int, dt DType, op ReduceOp) {
		c := &MPICommunicator{g: g, rank: 0, world: 2}
		bytes, ok := c.g.typedReduceValid(ptr, count, dt, op)
		want, err := c.allReduceChecks(ptr, count, dt, op)
		if agreeFast(t, name, bytes, ok, want, err, count, op) {
			same(t, err, c.AllReduce(ptr, count, dt, op), name)
		}
	})
	// The count MPI's int cannot carry fails as MPI's, after typedReduce passed.
	c := &MPICommunicator{g: newTypedGuard(false)}
	err := c.AllReduce(4096, math.MaxInt32+1, Float32, Sum)
	assert.ErrorIs(t, err, ErrInvalidSize)
	assert.ErrorContains(t, err, "above MPI's int count")
}

// TestMPILockFailsWhenFinalized checks the process lock's two outcomes: taken, with the
// call counted, while MPI runs; released again, with ErrClosed, once it was finalised.
func TestMPILockFailsWhenFinalized(t *testing.T) {
	c := &MPICommunicator{p: &mpiProcess{}, rank: 3}
	require.NoError(t, c.lock(opAllReduce))
	assert.False(t, c.p.mu.TryLock(), "the process lock is held")
	assert.Equal(t, int64(1), c.calls)
	c.p.mu.Unlock()

	c.p.finalized.Store(true)
	err := c.lock(opAllReduce)
	var ae *ArgError
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.ErrorIs(t, err, ErrClosed)
	assert.Equal(t, 3, ae.Value)
	assert.Contains(t, err.Error(), "mpi was finalized")
	assert.Equal(t, int64(1), c.calls, "a failed lock counts no call")
	assert.True(t, c.p.mu.TryLock(), "the process lock is released")
	c.p.mu.Unlock()
}
