//go:build !amd64 && !arm64

package goid

import "syscall"

// threadID identifies the calling OS thread (NCCL keeps group state per thread).
func threadID() int { return syscall.Gettid() }
