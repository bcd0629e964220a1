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
// Zero-byte operations are valid everywhere data moves (NCCL accepts count 0): they may
// pass a null pointer and, on NCCL, still reach the library as a zero-count operation so
// that every rank issues the same sequence. Allocation and registration reject zero
// bytes.
package comm
