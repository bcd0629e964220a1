// Package comm is the engine-facing communication layer of ncclgo: what an inference or
// training engine written in Go needs from NCCL, on raw device pointers.
//
// Two interfaces serve two kinds of callers:
//
//   - [Backend] works on device pointers and byte counts. Reductions sum elements of the
//     backend's element type (bfloat16 unless [WithElementType] says otherwise), set once
//     at construction. [Single] is the one-rank backend; [NCCL] drives a real (or, in
//     comm/commtest, a simulated) NCCL communicator.
//   - [Communicator] works on element counts with a [DType] and [ReduceOp] per call.
//     [NoOp] is the one-rank communicator; [NCCLCommunicator] the NCCL one.
//
// Every backend shares one validation layer ([Validate]): bad sizes, null pointers,
// ranks out of range, unbalanced groups, unknown handles, double frees and any use after
// Close return an [*ArgError] wrapping one of the Err sentinels, never a panic and never
// a call into NCCL.
//
// Concurrency: every type here is safe for concurrent use, but NCCL requires all ranks
// to issue operations in the same order, so an engine issues them from one goroutine
// per rank (or serialises them).
//
// Groups: NCCL keeps group state per OS thread, for every communicator of the process.
// comm maps that onto goroutines: GroupStart locks the calling goroutine to its OS
// thread until the matching GroupEnd, and every NCCL operation that goroutine issues
// in between, on any communicator (a tensor-parallel all-reduce inside a
// pipeline-parallel group), is part of the group; the outermost GroupEnd launches them
// all and, for blocking Backend collectives, waits for them. Operations that cannot be
// grouped (Sync, Barrier, RecvCommandU32, AllReduceAsync, SymmetricAlloc, Split, ...)
// fail with ErrGroupOpen there. Other goroutines are not affected by the group.
// Inside a group an operation makes comm's checks and returns their errors at once, but
// only records its NCCL calls: the outermost GroupEnd submits ncclGroupStart, every
// recorded call in issue order and ncclGroupEnd in one cgo crossing (a 128-call
// all-to-all costs one crossing, not 130). NCCL sees the same calls in the same order on
// the same thread, so its semantics are unchanged, with one difference: an argument
// NCCL itself rejects (not one comm checks) is reported by GroupEnd instead of by the
// operation, as an [*OpError] whose Err is the failing operation's own *OpError (its
// name, rank, size and peer, NCCL's result and text).
//
// Waiting: operations that wait (Backend.AllReduce and the other collectives without a
// stream argument, Communicator.Sync and Barrier, initialisation) poll the device and
// ncclCommGetAsyncError, so a transport error ends the wait with that error; the
// operation timeout (WithTimeout) bounds them and leaves the communicator unhealthy
// when it expires. RecvCommandU32 waits as long as its context allows.
//
// Bring-up, health and recovery: [Connect] starts a rank of a multi-process job from
// torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK):
// rank 0 serves a rendezvous store (comm/rendezvous) and publishes the NCCL unique id
// under a key of the communicator's generation, every rank passes a barrier that names
// the ranks that did not come, and the communicator is initialised non-blocking within
// the context's deadline ([JoinJob] and [Job.NewNCCL] do it in two steps).
// [WithWatchdog] checks each communicator in the background (asynchronous NCCL errors,
// operations past the timeout) and [WithAbortOnFailure] aborts a failed one.
// AttemptReconnect meets the other ranks, or a restarted process, in the next
// generation; [NCCL.Shrink] lets the survivors continue without the dead ranks.
//
// Zero-byte operations are valid everywhere data moves (NCCL accepts count 0): they may
// pass a null pointer and, on NCCL, still reach the library as a zero-count operation so
// that every rank issues the same sequence. Allocation and registration reject zero
// bytes.
package comm
