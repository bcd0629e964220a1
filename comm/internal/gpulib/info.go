package gpulib

// CommInfo is an optional Driver capability: ncclCommCount and ncclCommUserRank. comm
// needs it to learn a child communicator's rank and size after CommSplit or CommShrink;
// a Driver without it makes Split and Shrink report unsupported.
type CommInfo interface {
	// CommCount is ncclCommCount: the number of ranks in c.
	CommCount(c Comm) (int, error)
	// CommUserRank is ncclCommUserRank: the calling rank's index in c.
	CommUserRank(c Comm) (int, error)
}
