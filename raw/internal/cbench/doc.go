// Package cbench is the baseline of the raw packages' benchmarks: a bare cgo call to a C
// function through a function pointer, with nothing around it. _test.go files cannot use
// cgo, so the benchmarks of raw/nccl and raw/cuda call it from here. Without cgo the
// package is empty.
package cbench
