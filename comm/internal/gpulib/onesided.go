package gpulib

import "github.com/ncclgo/ncclgo/raw/nccl"

// SignalDesc is ncclWaitSignalDesc_t: wait for Count signals from Peer on signal index
// SigIdx of context Ctx.
type SignalDesc = nccl.WaitSignalDesc

// Window registration flags of CommWindowRegister (NCCL_WIN_*).
const (
	WinDefault        = nccl.WinDefault
	WinStrictOrdering = nccl.WinStrictOrdering
)

// OneSided is an optional Driver capability: NCCL's one-sided calls on registered
// windows (NCCL >= 2.29.2). A Driver without it makes comm's PutSignal, Signal,
// WaitSignal and WindowUserPtr report unsupported.
type OneSided interface {
	// PutSignal is ncclPutSignal: count elements of dt at local, enqueued on s, land in
	// peer's part of window win at offset bytes, then signal sigIdx of context ctx.
	PutSignal(local Ptr, count uint64, dt DataType, peer int, win Handle, offset uint64, sigIdx, ctx int, flags uint32, c Comm, s Stream) error
	// Signal is ncclSignal: a signal to peer without data.
	Signal(peer, sigIdx, ctx int, flags uint32, c Comm, s Stream) error
	// WaitSignal is ncclWaitSignal: s waits until every descriptor's signals have
	// arrived, and consumes them.
	WaitSignal(descs []SignalDesc, c Comm, s Stream) error
	// WinGetUserPtr is ncclWinGetUserPtr: the buffer window win was registered with.
	WinGetUserPtr(c Comm, win Handle) (Ptr, error)
}

// OneSidedBatch is a Batch that records the one-sided calls too, as NCCL takes them
// between ncclGroupStart and ncclGroupEnd (flags are 0, the only value NCCL accepts).
// WaitSignal keeps its own copy of descs until Submit.
type OneSidedBatch interface {
	PutSignal(local Ptr, count uint64, dt DataType, peer int, win Handle, offset uint64, sigIdx, ctx int, c Comm, s Stream) error
	Signal(peer, sigIdx, ctx int, c Comm, s Stream) error
	WaitSignal(descs []SignalDesc, c Comm, s Stream) error
}

var _ OneSidedBatch = (*CallBatch)(nil)
