// Package comm is the engine-facing communication layer of ncclgo: what an inference or
// training engine written in Go needs from NCCL, on raw device pointers.
//
// Which interface an engine holds: a [Backend]. It is the engine-facing interface, the
// one every backend of this module implements ([Single], nccl.Backend, the simulator's
// backends in comm/commtest) and [Validate] completes for backends written elsewhere: device
// pointers and byte counts; AllReduce, AllGather, ReduceScatter and Broadcast block until
// the result exists (the host waits), reducing the element type fixed at construction
// (there is no default: constructors fail without one); AllReduceAsync orders the same
// reduction on the engine's compute stream instead; Barrier only checks the
// communicator's state and synchronises nothing (it is the backend's cheap barrier: a
// real one is Communicator.Barrier); SendTo/RecvFrom enqueue on the caller's stream.
// Code written against Backend runs unchanged on one GPU, on many, and on the simulator.
//
// [Communicator] is the typed interface: element counts with a [DType] and [ReduceOp] per
// call, every collective NCCL has, and operations that are enqueued, not waited for:
// Communicator.AllReduce returns before the reduction completes, and Sync (or Barrier,
// a real barrier that implies Sync) waits. An engine takes it from its backend
// (nccl.Backend.Communicator) where it needs an operation Backend lacks, and holds it
// directly only where there is no Backend: comm/mpi's Communicator works on host memory
// (its DevicePtr arguments carry host addresses) and is not a Backend.
//
// Packages: comm (this package: interfaces, types, errors, Validate, Single, NoOp,
// InGroup; no cgo and nothing else of the module), comm/nccl (the NCCL backend),
// comm/mpi (the MPI communicator), comm/job (bring-up of a multi-process job),
// comm/rendezvous (the store) and comm/commtest (the simulator). Each constructor takes
// its own options type ([Option] here, nccl.Option, mpi.Option, job.Option).
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
// Groups: a [Group] is a group as a value ([NewGroup]; nccl.Group on the NCCL types). Add runs a function whose operations, on any communicators of that
// backend, are checked at once and recorded in the group; Submit launches them together
// (on NCCL: ncclGroupStart, every recorded call in order and ncclGroupEnd in one cgo
// crossing) and waits for the blocking collectives among them; Discard drops them.
// Nothing joins a group but what Add's functions issue, and a group never submitted is
// discarded, never inherited. GroupStart and GroupEnd (on both interfaces) group what
// the calling goroutine issues in between, on any communicator of the backend: NCCL keeps
// group state per OS thread, so GroupStart locks the goroutine to its thread until the
// matching GroupEnd, and the group is keyed by the runtime's goroutine id, which no
// other goroutine ever gets. A goroutine that ends inside a group leaves nothing another
// goroutine can see; [InGroup] is the scoped form, which discards the group when its
// function fails. Operations that cannot be grouped (Sync, Barrier, RecvCommandU32,
// AllReduceAsync, SymmetricAlloc, Split, ...) fail with ErrGroupOpen inside a group. An
// argument NCCL itself rejects (not one comm checks) is reported by GroupEnd (or Submit)
// instead of by the operation, as an [*OpError] whose Err is the failing operation's own
// *OpError.
//
// Waiting: operations that wait (Backend.AllReduce and the other collectives without a
// stream argument, Communicator.Sync and Barrier, initialisation) poll the device and
// ncclCommGetAsyncError, so a transport error ends the wait with that error; the
// operation timeout (nccl.WithTimeout) bounds them and leaves the communicator unhealthy
// when it expires. RecvCommandU32 waits as long as its context allows.
//
// Bring-up, health and recovery: comm/job's Connect starts a rank of a multi-process
// job from torchrun's environment (a rendezvous store on rank 0, a barrier that names
// the ranks that did not come, non-blocking NCCL initialisation within the context's
// deadline); nccl.WithWatchdog checks each communicator in the background; every rank's
// AttemptReconnect meets the others in the job's next generation, and nccl.Backend.Shrink
// lets the survivors continue without the dead ranks.
//
// Zero-byte operations are valid everywhere data moves (NCCL accepts count 0): they may
// pass a null pointer and, on NCCL, still reach the library as a zero-count operation so
// that every rank issues the same sequence. Allocation and registration reject zero
// bytes.
package comm
