//go:build !linux

package sim

// threadID is 0 where thread ids are not available: every caller shares one group
// state, as if the process had one thread.
func threadID() int { return 0 }
