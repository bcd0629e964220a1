// Package nccl is comm's NCCL backend: [Backend] (a comm.Backend) and [Communicator] (a
// comm.Communicator and comm.StreamSyncer) over one rank of an NCCL communicator,
// loading NCCL and CUDA at run time. Create one with [New] from a unique id that one
// rank made with [NewUniqueID]; comm/job creates them from torchrun's environment and
// comm/mpi from an MPI job.
package nccl
