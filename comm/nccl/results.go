package nccl

import rawnccl "github.com/ncclgo/ncclgo/raw/nccl"

// Result is an NCCL result code (ncclResult_t), the type raw/nccl generates: engines
// match this package's errors against its values with errors.Is (a failed
// communicator's error matches the result NCCL reported, e.g. RemoteError after a
// peer's transport failed) without importing raw/nccl. commtest.Cluster's
// InjectAsyncError takes one.
type Result = rawnccl.Result

// The NCCL results, as raw/nccl defines them.
const (
	Success            = rawnccl.Success
	UnhandledCudaError = rawnccl.UnhandledCudaError
	SystemError        = rawnccl.SystemError
	InternalError      = rawnccl.InternalError
	InvalidArgument    = rawnccl.InvalidArgument
	InvalidUsage       = rawnccl.InvalidUsage
	RemoteError        = rawnccl.RemoteError
	InProgress         = rawnccl.InProgress
	Timeout            = rawnccl.Timeout
)
