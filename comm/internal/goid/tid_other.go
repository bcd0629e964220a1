//go:build !linux && !amd64 && !arm64

package goid

// threadID returns 0 where thread ids are not available: group ownership is not checked.
func threadID() int { return 0 }
