package flightrec

import (
	"io"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
)

// sink keeps the stand-in operation from being optimised away.
var sink uint64

// op stands for the backend's operation around the record: a little work of its own.
//
//go:noinline
func op(n int64) { sink += uint64(n) }

// benchRecord times an operation with Record (and Completed when complete) against
// the same operation with the recorder off (a nil *Comm), alternating in blocks in
// one run, and reports recorder-ns/op (the difference), the ratio, and allocations.
func benchRecord(b *testing.B, g Group, complete bool) {
	r := newRecorder(b, Config{Entries: DefaultEntries}, 0)
	on := newComm(b, r, g)
	var off *Comm
	call := Call{Op: AllReduce, In: 1 << 20, Out: 1 << 20, Type: Float32}
	side := func(c *Comm) func(int) {
		return func(n int) {
			for range n {
				id := c.Record(call)
				op(call.In)
				if complete {
					c.Completed(id)
				}
			}
		}
	}
	one := side(on)
	report(b, side(on), side(off), func() { one(1) })
}

// Record then Completed: what a backend that learns of each completion calls.
func BenchmarkRecord(b *testing.B) { benchRecord(b, Group{Name: "0", Ranks: []int{0}}, true) }

// The NCCL backend's path: Record only (its watchdog completes batches with
// CompletedThrough, off the caller's path). Also reports, for scale, one uncontended
// lock and unlock on this machine in the same run.
func BenchmarkRecordOnly(b *testing.B) {
	benchRecord(b, Group{Name: "0", Ranks: []int{0}}, false)
	var mu sync.Mutex
	lock := pairbench.AlternateMedian(21, max(b.N/21, 1), nil, func(n int) {
		for range n {
			mu.Lock()
			sink++
			mu.Unlock()
		}
	}, func(n int) {})
	b.ReportMetric(float64(lock.A.Nanoseconds()), "lock-unlock-ns")
}

// MPI's blocking path: Record alone on a Blocking communicator (which completes the
// operation before).
func BenchmarkRecordBlocking(b *testing.B) {
	benchRecord(b, Group{Name: "0", Ranks: []int{0}, Blocking: true}, false)
}

// The grouped path: a group of 8 operations recorded with RecordGroup and completed
// once (figures per group: divide by 8 for one operation).
func BenchmarkRecordGroup(b *testing.B) {
	r := newRecorder(b, Config{Entries: DefaultEntries}, 0)
	on := newComm(b, r, Group{Name: "0", Ranks: []int{0, 1}})
	var off *Comm
	calls := make([]Call, 8)
	for i := range calls {
		calls[i] = Call{Op: Send, Peer: 1, In: 4096, Out: 4096, Type: BFloat16}
	}
	side := func(c *Comm) func(int) {
		return func(n int) {
			for range n {
				id := c.RecordGroup(calls)
				for i := range calls {
					op(calls[i].In)
				}
				c.Completed(id)
			}
		}
	}
	one := side(on)
	report(b, side(on), side(off), func() { one(1) })
}

// report times on against off in alternating blocks and reports per-call figures.
func report(b *testing.B, on, off func(int), one func()) {
	b.Helper()
	allocs := testing.AllocsPerRun(100, one)
	b.ResetTimer()
	rounds := 21
	n := max(b.N/rounds, 1)
	m := pairbench.AlternateMedian(rounds, n, nil, on, off)
	b.ReportMetric(float64(m.A.Nanoseconds()), "on-ns/op")
	b.ReportMetric(float64(m.B.Nanoseconds()), "off-ns/op")
	b.ReportMetric(float64(m.A-m.B), "recorder-ns/op")
	b.ReportMetric(m.Ratio, "on/off")
	b.ReportMetric(allocs, "recorder-allocs/op")
}

// A dump of 2,000 entries (four communicators of 500), against writing the same
// number of bytes: dump-ms/op is the figure the 50 ms target is about.
func BenchmarkDump2000(b *testing.B) {
	r := newRecorder(b, Config{Entries: 500, CallSites: true}, 0)
	for i := range 4 {
		c := newComm(b, r, Group{Name: string(rune('0' + i)), ID: i, Ranks: []int{0, 1, 2, 3}})
		for range 500 {
			c.Completed(c.Record(Call{Op: AllReduce, In: 1 << 20, Out: 1 << 20, Type: Float32}))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := r.Dump(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "dump-ms/op")
}
