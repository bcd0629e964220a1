//go:build !amd64 && !arm64

package goid

// Key identifies the calling OS thread where the goroutine cannot be read cheaply (a
// goroutine with a group open is locked to its thread, so the thread names it). It is
// never 0; without thread ids (not Linux) every goroutine gets the same key.
func Key() uintptr { return uintptr(threadID()) + 1 }
