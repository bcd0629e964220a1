// Package goid identifies the calling goroutine cheaply, for comm's group scope: NCCL
// keeps its group state per OS thread, and a goroutine with a group open is locked to
// its thread, which runs no other goroutine, so for the group's life the goroutine
// names the thread.
package goid
