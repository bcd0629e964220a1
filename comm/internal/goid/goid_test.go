package goid

import (
	"sync"
	"testing"
)

// TestIDIsTheRuntimesGoroutineID checks that ID is what runtime.Stack prints, on the
// fast path where there is one, in this goroutine and in others.
func TestIDIsTheRuntimesGoroutineID(t *testing.T) {
	if fastPath && idOffset == 0 {
		t.Fatal("no offset of the goroutine id found in the runtime's goroutine record")
	}
	if got, want := ID(), parsed(); got != want || got == 0 {
		t.Fatalf("ID() = %d, runtime.Stack says %d", got, want)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got, want := ID(), parsed(); got != want {
				t.Errorf("ID() = %d, runtime.Stack says %d", got, want)
			}
		})
	}
	wg.Wait()
}

// TestIDIsNeverReused checks that goroutines started one after the other, each after
// the last ended (so that the runtime reuses their records), all get different ids.
func TestIDIsNeverReused(t *testing.T) {
	seen := map[uint64]bool{ID(): true}
	for i := range 1000 {
		ch := make(chan uint64)
		go func() { ch <- ID() }()
		id := <-ch
		if seen[id] {
			t.Fatalf("goroutine %d: id %d reused", i, id)
		}
		seen[id] = true
	}
}

// BenchmarkID measures ID (one load on amd64 and arm64).
func BenchmarkID(b *testing.B) {
	for b.Loop() {
		_ = ID()
	}
}
