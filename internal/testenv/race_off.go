//go:build !race

package testenv

// RaceEnabled says that the program runs under the race detector, whose scheduler
// randomises the order in which woken goroutines run and whose sync.Pool drops a
// quarter of what is put in it.
const RaceEnabled = false
