//go:build amd64 || arm64

package goid

// fastPath: loadAt reads the calling goroutine's record.
const fastPath = true

// loadAt returns the 8 bytes at off in the runtime's record of the calling goroutine.
func loadAt(off uintptr) uint64
