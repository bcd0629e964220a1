// Package commtest tests code that uses package comm without a GPU, and checks that a
// comm.Backend behaves like the others.
//
// [NewCluster] starts n ranks of comm's real NCCL backend (the same code that drives a
// GPU) on a simulated machine: host memory stands in for each rank's device, streams run
// on goroutines, and a simulated NCCL connects the ranks with exact arithmetic for every
// element type. Engine authors use it to test their own engines in CI; [Cluster] gives
// device memory access, streams, the add kernels, fault injection and leak counters.
// [RunRanks] runs a function on every rank, each in its own goroutine as separate
// processes would, attributes each error to its rank and, at the context's deadline,
// names the ranks still running (a [RanksError]).
//
// [RunConformance] is one table-driven suite that every backend must pass: every
// operation, every element type it applies to, in place and out of place, every root,
// grouped send/receive rings, barrier, AllReduceAsync ordering, RecvCommandU32,
// registration, symmetric memory, the typed Communicator, and a bad-input table that
// must fail with comm's sentinel errors without reaching the library; group scope
// across communicators and backends, commands under cancellation, idle workers under
// the watchdog and typed asynchronous errors. [SimHarness] runs it on the simulator,
// [SingleHarness] on comm.Single; the gpu-tagged tests run it on real NCCL. A harness
// lists the optional capabilities it must have (Harness.Requires): a case that every
// rank answers with ErrUnsupported is skipped only for a capability not listed there.
// The package depends on the standard library only (and comm), so importing it from an
// engine's tests adds nothing to the engine's module.
//
// # What the simulation does
//
// Like CUDA: allocations are zeroed, aligned (512 bytes; ncclMemAlloc 2 MiB) and never
// reused, so an access past an allocation, into freed memory or into another device's
// memory is an error; work on one stream runs in order, streams are independent except
// through events; a fault in device code (a kernel or collective touching a bad address,
// a misaligned add kernel) is sticky: every later CUDA call of that device fails.
//
// Like NCCL: collectives match by their order on each communicator and must agree on
// operation, count, type, reduce op and root, or the communicator fails with
// ncclInvalidUsage on every rank; collectives of zero elements are discarded (no
// matching, no work: a zero-count all-reduce does not synchronise anything); a send
// completes only when the matching receive runs (same bytes, or ncclInvalidUsage), so
// exchanges that must progress together need one group on every rank, and an unmatched
// send never completes; group state is per OS thread for every communicator of the
// process, so operations a thread issues inside a group, on any communicator, launch
// together at its outermost group end, and an argument error inside a group drops the
// whole group; non-blocking
// communicators report ncclInProgress until every rank has joined (init, split, shrink,
// window registration); destroy waits for pending work (it hangs while an operation
// waits for a dead peer), abort never waits; revoke ends in-flight work; shrink and
// split build new communicators; functions newer than the simulated version
// (WithNCCLVersion) are missing. Unlike NCCL, which leaves them to race on the GPU, the
// simulator reports buffers of one call that overlap anywhere but NCCL's in-place
// position, and receives of one group from different peers into overlapping memory, as
// ncclInvalidArgument.
//
// Arithmetic: integers wrap, avg of integers truncates towards zero; float32 and
// float64 use their own IEEE arithmetic; float16, bfloat16 and fp8 compute each step in
// float32 and round once to nearest even (fp8 saturates); max and min ignore NaN; avg of
// floating types pre-multiplies by 1/n; a reduction folds ranks in rank order, rounding
// at every step. Results equal real NCCL's whenever the order of reduction does not
// change them (two ranks, integers, exactly representable partial results: the inputs
// RunConformance uses).
package commtest
