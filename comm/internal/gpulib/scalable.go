package gpulib

// ScalableInit is an optional Driver capability: ncclCommInitRankScalable (NCCL >=
// 2.23), a communicator initialised from several unique ids. A Driver without it makes
// nccl.NewScalable report unsupported.
type ScalableInit interface {
	// CommInitRankScalable is ncclCommInitRankScalable: rank of nranks, from ids (the
	// same ids in the same order on every rank, 1 to nranks of them).
	CommInitRankScalable(nranks int, ids []UniqueID, rank int, cfg Config) (Comm, error)
}
