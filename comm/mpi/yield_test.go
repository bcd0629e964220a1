package mpi

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestMPIYieldCadence checks when a blocking MPI call's unlock yields: after every 32nd
// call or one of mpiAlwaysTimed bytes or more, once mpiYieldEvery has passed since the
// last yield; and that the process lock is free afterwards either way.
func TestMPIYieldCadence(t *testing.T) {
	c := &Communicator{p: &mpiProcess{}, mu: new(sync.Mutex)}
	long := time.Now().Add(-2 * mpiYieldEvery)
	for _, tc := range []struct {
		name   string
		calls  int64
		bytes  int
		last   time.Time
		yields bool
	}{
		{"32nd call, due", 64, 8, long, true},
		{"32nd call, not due", 64, 8, time.Now().Add(time.Hour), false},
		{"other call", 65, 8, long, false},
		{"large call, due", 65, mpiAlwaysTimed, long, true},
		{"large call, not due", 65, mpiAlwaysTimed, time.Now().Add(time.Hour), false},
		{"first call of the process", 32, 8, time.Time{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.calls, c.yielded = tc.calls, tc.last
			c.mu.Lock()
			before := time.Now()
			c.unlockBlocking(tc.bytes)
			if tc.yields {
				assert.False(t, c.yielded.Before(before), "the yield is recorded")
			} else {
				assert.Equal(t, tc.last, c.yielded, "no yield")
			}
			assert.True(t, c.mu.TryLock(), "the process lock is released")
			c.mu.Unlock()
		})
	}
}
