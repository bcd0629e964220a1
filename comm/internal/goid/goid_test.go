//go:build amd64 || arm64

package goid

import (
	"sync"
	"testing"
)

// TestKeyNamesTheGoroutine checks that Key is stable within a goroutine, never 0, and
// differs between goroutines that run at the same time.
func TestKeyNamesTheGoroutine(t *testing.T) {
	me := Key()
	if me == 0 || Key() != me {
		t.Fatalf("Key: %#x then %#x; want a stable non-zero key", me, Key())
	}
	const n = 8
	keys := make([]uintptr, n)
	var started, done sync.WaitGroup
	started.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for i := range n {
		go func() {
			defer done.Done()
			keys[i] = Key()
			started.Done()
			<-release // all alive at once: no key can be reused
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	seen := map[uintptr]bool{me: true}
	for i, k := range keys {
		if k == 0 || seen[k] {
			t.Fatalf("goroutine %d: key %#x is 0 or shared", i, k)
		}
		seen[k] = true
	}
}
