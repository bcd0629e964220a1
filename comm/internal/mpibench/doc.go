// Package mpibench is the baseline of the MPI Communicator's benchmarks: a C loop that
// calls MPI_Allreduce of the loaded libmpi directly, n times, with nothing around the
// calls. _test.go files cannot use cgo, so comm's benchmarks call it from here. Without
// cgo, AllReduceLoop returns an error.
package mpibench
