// Package leaktest checks that a test leaves no goroutines behind.
package leaktest

import (
	"runtime"
	"testing"
	"time"
)

// Check fails the test if goroutines started during it still run after its cleanups.
func Check(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second) // generous: the machine may be loaded
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines left (started with %d):\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
	})
}
