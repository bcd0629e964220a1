package flightrec

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkRecordUnderBackendLock is one record and its completion as the NCCL
// backend's AllReduce makes them: Record under the backend's lock (Group.Lock),
// CompletedLater after, against the same lock and unlock with the recorder off (a
// nil *Comm), alternating in blocks: recorder-ns/op is the recorder's part of the
// backend's figure (BenchmarkFlightRecorderCost in comm/nccl).
func BenchmarkRecordUnderBackendLock(b *testing.B) {
	r := newRecorder(b, Config{Entries: DefaultEntries}, 0)
	var mu sync.Mutex
	on := newComm(b, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	var off *Comm
	call := Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32}
	side := func(c *Comm) func(int) {
		return func(n int) {
			for range n {
				mu.Lock()
				id := c.Record(call)
				mu.Unlock()
				op(call.In)
				c.CompletedLater(id)
			}
		}
	}
	one := side(on)
	report(b, side(on), side(off), func() { one(1) })
}

// TestRecordIDsAcrossCommunicators: record ids order the records of all communicators
// of the process as they were made, before and after a second communicator registers
// (the first records alone without an atomic id, then all share one), with rings
// guarded by a backend's lock (Group.Lock) and by their own.
func TestRecordIDsAcrossCommunicators(t *testing.T) {
	r := newRecorder(t, Config{Entries: 16}, 0)
	var mu sync.Mutex
	world := newComm(t, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	rec := func(c *Comm, n int64) {
		mu.Lock()
		c.Record(Call{Op: AllReduce, In: n, Out: n, Type: Float32})
		mu.Unlock()
	}
	rec(world, 1)
	rec(world, 2)
	split := newComm(t, r, Group{Name: "0:split", Ranks: []int{0}})
	split.Record(Call{Op: AllReduce, In: 3, Out: 3, Type: Float32})
	rec(world, 4)
	split.Record(Call{Op: AllReduce, In: 5, Out: 5, Type: Float32})
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries, 5)
	for i, e := range tr.Entries {
		assert.Equal(t, int64(i), e.RecordID)
		assert.Equal(t, [][]int64{{int64(i + 1)}}, e.InputSizes, "record %d", i)
	}
}

// newBackendComm is a recorder with one communicator whose ring is guarded by a
// backend's lock, as the NCCL backend registers it, and a clock that does not tick
// during the test (its cached time is set by the test).
func newBackendComm(t *testing.T, entries int) (*Recorder, *Comm, *sync.Mutex) {
	t.Helper()
	r := newRecorder(t, Config{Entries: entries, Resolution: time.Hour}, 0)
	var mu sync.Mutex
	return r, newComm(t, r, Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu}), &mu
}

func (c *Comm) recordLocked(mu *sync.Mutex, call Call) ID {
	mu.Lock()
	defer mu.Unlock()
	return c.Record(call)
}

var allReduce4 = Call{Op: AllReduce, In: 4, Out: 4, Type: Float32}

// Two goroutines' CompletedLater calls each count, in whatever order they land: a
// call for an earlier operation made after one for a later operation (the goroutine
// that waited for it was descheduled) takes nothing back.
func TestCompletedLaterKeepsEveryMark(t *testing.T) {
	r, c, mu := newBackendComm(t, 8)
	var ids []ID
	for range 5 {
		ids = append(ids, c.recordLocked(mu, allReduce4))
	}
	r.now.Store(int64(time.Second))
	c.CompletedLater(ids[4])
	r.now.Store(int64(2 * time.Second))
	c.CompletedLater(ids[2])
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries, 5)
	for i, e := range tr.Entries {
		require.Equal(t, "completed", e.State, "operation %d", i+1)
		// Each completed no later than the earliest mark at or after it: the first.
		assert.Equal(t, r.wall(int64(time.Second)), e.Completed, "operation %d", i+1)
	}
}

// A CompletedLater call for an operation whose slot a later operation took (the ring
// went round while its goroutine waited) completes neither.
func TestCompletedLaterOfALeftOperationMarksNoOther(t *testing.T) {
	r, c, mu := newBackendComm(t, 4)
	first := c.recordLocked(mu, allReduce4)
	for range 4 { // the fourth takes first's slot
		c.recordLocked(mu, allReduce4)
	}
	r.now.Store(int64(time.Second))
	c.CompletedLater(first)
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries, 4)
	for i, e := range tr.Entries {
		assert.Equal(t, "scheduled", e.State, "operation %d", i+2)
	}
}

// What CompletedLater said of an operation is kept when the operation leaves the ring
// before any dump: the dump's last completed collective is it.
func TestCompletedLaterOutlivesTheRing(t *testing.T) {
	r, c, mu := newBackendComm(t, 4)
	c.CompletedLater(c.recordLocked(mu, allReduce4)) // collective #1
	for range 6 {
		c.recordLocked(mu, Call{Op: Send, Peer: 1, In: 4, Out: 4, Type: Float32})
	}
	_, status, entries := r.snapshot()
	require.Len(t, entries, 4)
	assert.Equal(t, pgStatus{enqueued: 1, started: 1, completed: 1}, status[0])
}

// A mark's time, kept to the microsecond modulo 2^44, is read back exactly relative to
// its operation's creation, however long the recorder has run; a mark older than the
// operation in its slot is refused.
func TestCompletedLaterTimeAfterLongRuns(t *testing.T) {
	r, c, mu := newBackendComm(t, 4)
	created := int64(3*markTimeMod)*1000 + 123 // the recorder has run for about 1.7 years
	r.now.Store(created)
	id := c.recordLocked(mu, allReduce4)
	done := created + int64(36*time.Hour) + 456
	r.now.Store(done)
	c.CompletedLater(id)
	mu.Lock()
	e := c.slot(id)
	got, ok := c.markOf(e)
	e.created = done + int64(time.Second) // as if an operation made after the mark held the slot
	_, stale := c.markOf(e)
	mu.Unlock()
	require.True(t, ok)
	assert.Equal(t, (done+999)/1000*1000, got, "the completion time, rounded up to the microsecond")
	assert.False(t, stale, "a mark made before the operation was accepted")
}
