// Package mpi is comm's MPI communicator: [Communicator] implements comm.Communicator
// over MPI_COMM_WORLD (or a Split of it) on host memory, and [Communicator.NewNCCL]
// brings up an NCCL backend (comm/nccl) of the same job without a rendezvous store.
//
// MPI is not a comm.Backend: its buffers are host memory. The pointers its methods take
// are comm.DevicePtr values only because comm.Communicator is one interface for every
// transport; here they hold host addresses (for example
// comm.DevicePtr(uintptr(unsafe.Pointer(&buf[0])))).
package mpi
