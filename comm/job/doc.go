// Package job brings up the NCCL backends (comm/nccl) of a multi-process job: [Connect]
// in one call from the launcher's environment (torchrun, srun, mpirun, or a Kubernetes
// LeaderWorkerSet, PyTorchJob, TrainJob or JobSet: see rendezvous.FromEnv), or [JoinJob]
// then [Job.NewNCCL]. Rank 0
// serves a rendezvous store (comm/rendezvous, compatible with PyTorch's TCPStore) or
// uses torchrun's agent store, and every communicator generation (bring-up,
// AttemptReconnect, a Shrink's reconnections) meets there.
package job
