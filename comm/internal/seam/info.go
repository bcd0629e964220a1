package seam

// CommInfo is an optional Driver capability: ncclCommCount and ncclCommUserRank. comm
// needs it to learn a child communicator's rank and size after CommSplit or CommShrink;
// a Driver without it makes Split and Shrink report unsupported.
type CommInfo interface {
	// CommCount is ncclCommCount: the number of ranks in c.
	CommCount(c Comm) (int, error)
	// CommUserRank is ncclCommUserRank: the calling rank's index in c.
	CommUserRank(c Comm) (int, error)
}

// NCCL constants the backend passes through the Driver (values from nccl.h).
const (
	// SplitNoColor is NCCL_SPLIT_NOCOLOR: the rank joins no child communicator.
	SplitNoColor = -1
	// WinCollSymmetric is NCCL_WIN_COLL_SYMMETRIC for CommWindowRegister.
	WinCollSymmetric = 0x01
	// ShrinkDefault and ShrinkAbort are the NCCL_SHRINK_* flags of CommShrink.
	ShrinkDefault = 0x00
	ShrinkAbort   = 0x01
)
