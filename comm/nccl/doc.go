// Package nccl is comm's NCCL backend: [Backend] (a comm.Backend) and [Communicator] (a
// comm.Communicator and comm.StreamSyncer) over one rank of an NCCL communicator,
// loading NCCL and CUDA at run time. Create one with [New] from a unique id that one
// rank made with [NewUniqueID]; comm/job creates them from torchrun's environment and
// comm/mpi from an MPI job.
//
// Files, by concern:
//
//	nccl.go                 the two types, their construction, NCCL's version thresholds
//	options.go              the options New reads
//	config_nccl.go          ncclConfig_t settings (WithCTAs, WithConfigField, ...)
//	nccl_ops.go             operations: one enqueue sequence used by every call
//	nccl_collectives.go     the typed collectives beyond the four basic ones
//	nccl_group.go           groups
//	nccl_wait.go            waiting for the device and for NCCL
//	nccl_lifecycle.go       init, Close, teardown
//	nccl_memory.go          registration, symmetric memory
//	nccl_register_window.go symmetric windows
//	nccl_recovery.go        AttemptReconnect, Split, Shrink, Revoke
//	nccl_redop.go           PreMulSum operators
//	nccl_streams.go         StreamComm: the communicator on a caller's stream
//	nccl_graph.go           CUDA-graph capture
//	nccl_tworank.go         the two-rank send/recv + add all-reduce path
//	nccl_watchdog.go        the health watchdog
//	nccl_job.go             the backend's place in a comm/job Job
package nccl
