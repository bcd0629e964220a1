//go:build race

package mpi_test

// raceEnabled says that the tests run under the race detector, whose scheduler
// randomises the order in which woken goroutines run.
const raceEnabled = true
