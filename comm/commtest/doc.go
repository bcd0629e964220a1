// Package commtest tests code that uses package comm without a GPU, and checks that a
// comm.Backend behaves like the others.
//
// [NewCluster] starts n ranks of comm's real NCCL backend (the same code that drives a
// GPU) on a simulated machine: host memory stands in for each rank's device, streams run
// on goroutines, and a simulated NCCL connects the ranks with exact arithmetic for every
// element type. The simulation is as strict as NCCL (mismatched collectives, unmatched
// sends, use after abort are errors or hangs, as they are on hardware) and can inject
// faults: a rank dies, NCCL reports an asynchronous error, an operation never completes,
// a library call fails. Engine authors use it to test their own engines in CI.
//
// [RunConformance] is one table-driven suite that every backend must pass: every
// operation, every element type it applies to, in place and out of place, every root,
// grouped send/receive rings, barrier, AllReduceAsync ordering, RecvCommandU32,
// registration, symmetric memory, and a bad-input table that must fail with comm's
// sentinel errors without reaching the library. [SimHarness] runs it on the simulator,
// [SingleHarness] on comm.Single; the gpu-tagged tests run it on real NCCL.
package commtest
