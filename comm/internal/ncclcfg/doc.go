// Package ncclcfg is the configuration of comm/nccl's constructors, shared with the
// packages that create NCCL backends (comm/job, comm/mpi) and with comm/commtest: the
// fields they set that are not options of comm/nccl's public API (the driver, a job
// membership).
package ncclcfg
