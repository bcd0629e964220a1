package gpulib

import "fmt"

// Fn names the communication function of a recorded Call: the Driver method of the same
// name.
type Fn uint8

// The functions a group records.
const (
	FnSend Fn = iota + 1
	FnRecv
	FnAllReduce
	FnBroadcast
	FnReduce
	FnAllGather
	FnReduceScatter
	FnAlltoAll
	FnGather
	FnScatter
	// FnPutSignal, FnSignal and FnWaitSignal are the one-sided calls (OneSided's
	// methods; a group records them through a OneSidedBatch).
	FnPutSignal
	FnSignal
	FnWaitSignal
)

var fnNames = [...]string{"", "ncclSend", "ncclRecv", "ncclAllReduce", "ncclBroadcast",
	"ncclReduce", "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather",
	"ncclScatter", "ncclPutSignal", "ncclSignal", "ncclWaitSignal"}

// String is the C name of the function ("ncclSend").
func (f Fn) String() string {
	if int(f) < len(fnNames) && f > 0 {
		return fnNames[f]
	}
	return fmt.Sprintf("gpulib.Fn(%d)", uint8(f))
}

// Call is one recorded NCCL communication call, with the arguments of the Driver method
// its Fn names: Send, Recv, Count (the count argument of that method), Type, Op, Peer
// (the peer of Send, Recv, PutSignal and Signal, the root of Broadcast, Reduce, Gather
// and Scatter), Comm and Stream. Send, Recv and PutSignal use Send as their buffer;
// PutSignal's window and offset are Win and Offset, PutSignal's and Signal's signal
// index and context SigIdx and Ctx, and WaitSignal's descriptors Descs (the Call's
// own copy). A group may hold calls of several communicators, each bound to its own
// device: a driver that needs the device of a call finds it from Comm.
type Call struct {
	Fn     Fn
	Peer   int
	Send   Ptr
	Recv   Ptr
	Count  uint64
	Type   DataType
	Op     RedOp
	Comm   Comm
	Stream Stream
	Win    Handle
	Offset uint64
	SigIdx int
	Ctx    int
	Descs  []SignalDesc
}

// SubmitGroupStart is the index Submit reports when ncclGroupStart itself failed.
const SubmitGroupStart = -1

// Make calls the method of c.Fn on d (a Driver makes the call, a Batch records it).
func (c *Call) Make(d Ops) error {
	switch c.Fn {
	case FnSend:
		return d.Send(c.Send, c.Count, c.Type, c.Peer, c.Comm, c.Stream)
	case FnRecv:
		return d.Recv(c.Send, c.Count, c.Type, c.Peer, c.Comm, c.Stream)
	case FnAllReduce:
		return d.AllReduce(c.Send, c.Recv, c.Count, c.Type, c.Op, c.Comm, c.Stream)
	case FnBroadcast:
		return d.Broadcast(c.Send, c.Recv, c.Count, c.Type, c.Peer, c.Comm, c.Stream)
	case FnReduce:
		return d.Reduce(c.Send, c.Recv, c.Count, c.Type, c.Op, c.Peer, c.Comm, c.Stream)
	case FnAllGather:
		return d.AllGather(c.Send, c.Recv, c.Count, c.Type, c.Comm, c.Stream)
	case FnReduceScatter:
		return d.ReduceScatter(c.Send, c.Recv, c.Count, c.Type, c.Op, c.Comm, c.Stream)
	case FnAlltoAll:
		return d.AlltoAll(c.Send, c.Recv, c.Count, c.Type, c.Comm, c.Stream)
	case FnGather:
		return d.Gather(c.Send, c.Recv, c.Count, c.Type, c.Peer, c.Comm, c.Stream)
	case FnScatter:
		return d.Scatter(c.Send, c.Recv, c.Count, c.Type, c.Peer, c.Comm, c.Stream)
	case FnPutSignal, FnSignal, FnWaitSignal:
		return c.makeOneSided(d)
	}
	return fmt.Errorf("recorded call: unknown function %v", c.Fn)
}

// makeOneSided is Make of a one-sided call: d records it (a OneSidedBatch) or makes it
// (a OneSided driver).
func (c *Call) makeOneSided(d Ops) error {
	if b, ok := d.(OneSidedBatch); ok {
		switch c.Fn {
		case FnPutSignal:
			return b.PutSignal(c.Send, c.Count, c.Type, c.Peer, c.Win, c.Offset, c.SigIdx, c.Ctx, c.Comm, c.Stream)
		case FnSignal:
			return b.Signal(c.Peer, c.SigIdx, c.Ctx, c.Comm, c.Stream)
		}
		return b.WaitSignal(c.Descs, c.Comm, c.Stream)
	}
	os, ok := d.(OneSided)
	if !ok {
		return fmt.Errorf("recorded call %v: %T has no one-sided calls", c.Fn, d)
	}
	switch c.Fn {
	case FnPutSignal:
		return os.PutSignal(c.Send, c.Count, c.Type, c.Peer, c.Win, c.Offset, c.SigIdx, c.Ctx, 0, c.Comm, c.Stream)
	case FnSignal:
		return os.Signal(c.Peer, c.SigIdx, c.Ctx, 0, c.Comm, c.Stream)
	}
	return os.WaitSignal(c.Descs, c.Comm, c.Stream)
}

// SubmitEach is Submit made of one Driver call per function, for drivers without a
// batched path: GroupStart on d, every call through driverOf(call) (d when driverOf is
// nil), then GroupEnd on d, with Submit's results. Every call is made whatever the
// earlier ones returned (NCCL defers errors inside a group to ncclGroupEnd, which must
// still be called).
func SubmitEach(d Driver, calls []Call, driverOf func(*Call) Driver) (int, error) {
	if err := d.GroupStart(); err != nil {
		return SubmitGroupStart, err
	}
	failed, first := len(calls), error(nil)
	for i := range calls {
		cd := d
		if driverOf != nil {
			cd = driverOf(&calls[i])
		}
		err := calls[i].Make(cd)
		if err != nil && first == nil && !isInProgress(err) {
			failed, first = i, err
		}
	}
	err := d.GroupEnd()
	if first != nil {
		return failed, first
	}
	return len(calls), err
}

// isInProgress reports ncclInProgress: a non-blocking communicator's answer, not a
// failure.
func isInProgress(err error) bool {
	e, ok := err.(*Error)
	return ok && e.Code == InProgress
}
