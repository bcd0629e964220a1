package flightrec

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkRecordUnderBackendLock is one record and its completion as the NCCL
// backend's AllReduce makes them: Record under the backend's lock (Group.Lock),
// CompletedLater after.
func BenchmarkRecordUnderBackendLock(b *testing.B) {
	r, err := New(Config{Entries: DefaultEntries}, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	var mu sync.Mutex
	c, err := r.Comm(Group{Name: "0", Ranks: []int{0, 1}, Lock: &mu})
	if err != nil {
		b.Fatal(err)
	}
	call := Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32}
	b.ReportAllocs()
	for b.Loop() {
		mu.Lock()
		id := c.Record(call)
		mu.Unlock()
		c.CompletedLater(id)
	}
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
