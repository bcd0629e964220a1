package flightrec

import (
	"sync"
	"testing"
)

// BenchmarkRecordLocked is one record and its completion as the NCCL backend's
// AllReduce makes them: RecordLocked under the backend's lock, CompletedLater after.
func BenchmarkRecordLocked(b *testing.B) {
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
		id := c.RecordLocked(call)
		mu.Unlock()
		c.CompletedLater(id)
	}
}
