package gpulib

// Ops are the NCCL communication calls, the ones a group records: a Driver makes them
// at once, a Batch records them for its Submit.
type Ops interface {
	AllReduce(send, recv Ptr, count uint64, dt DataType, op RedOp, c Comm, s Stream) error
	Broadcast(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error
	AllGather(send, recv Ptr, sendCount uint64, dt DataType, c Comm, s Stream) error
	ReduceScatter(send, recv Ptr, recvCount uint64, dt DataType, op RedOp, c Comm, s Stream) error
	// Reduce is ncclReduce: recv is used on root only.
	Reduce(send, recv Ptr, count uint64, dt DataType, op RedOp, root int, c Comm, s Stream) error
	// AlltoAll, Gather and Scatter are ncclAlltoAll, ncclGather and ncclScatter (NCCL >=
	// 2.28.3); count is per rank. Gather's recv and Scatter's send are used on root only.
	AlltoAll(send, recv Ptr, count uint64, dt DataType, c Comm, s Stream) error
	Gather(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error
	Scatter(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error
	Send(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error
	Recv(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error
}

// Batch records a group's calls as they are made (its Ops only record, in the driver's
// own form, and fail only when the call cannot be recorded, e.g. a missing symbol) and
// makes them all with Submit: ncclGroupStart, every recorded call in order,
// ncclGroupEnd, with Driver.Submit's semantics and results (indexes count the recorded
// calls). Reset empties it, keeping its memory, for the next group. A Batch is used by
// one goroutine at a time.
type Batch interface {
	Ops
	Submit() (int, error)
	Reset()
	// Accepts reports whether the batch can take a group whose first call is d's (and
	// so be reused for it, instead of a new NewBatch(d)).
	Accepts(d Driver) bool
}

// Batcher is a Driver with its own Batch, recording straight into the form its
// submission runs (one crossing into the library for the whole group).
type Batcher interface {
	NewBatch() Batch
}

// NewBatch returns a new Batch of d: its own when d is a Batcher, else a CallBatch
// submitted through d.Submit.
func NewBatch(d Driver) Batch {
	if b, ok := d.(Batcher); ok {
		return b.NewBatch()
	}
	return &CallBatch{d: d, submit: d.Submit}
}

// CallBatch is the Batch of a driver without its own: it keeps the calls as Call values
// and submits them with the driver's Submit.
type CallBatch struct {
	calls  []Call
	d      Driver
	submit func([]Call) (int, error)
}

// add appends a call with fn and peer set, to be filled in place (not through the
// stack: the array is reused).
func (b *CallBatch) add(fn Fn, peer int) *Call {
	n := len(b.calls)
	if n == cap(b.calls) {
		b.calls = append(b.calls, Call{})
	} else {
		b.calls = b.calls[:n+1]
	}
	c := &b.calls[n]
	*c = Call{Fn: fn, Peer: peer, Descs: c.Descs[:0]} // Descs: a reused record keeps its array
	return c
}

// AllReduce records a call of ncclAllReduce; it always succeeds.
func (b *CallBatch) AllReduce(send, recv Ptr, count uint64, dt DataType, op RedOp, c Comm, s Stream) error {
	k := b.add(FnAllReduce, 0)
	k.Send, k.Recv, k.Count, k.Type, k.Op, k.Comm, k.Stream = send, recv, count, dt, op, c, s
	return nil
}

// Broadcast records a call of ncclBroadcast; it always succeeds.
func (b *CallBatch) Broadcast(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error {
	k := b.add(FnBroadcast, root)
	k.Send, k.Recv, k.Count, k.Type, k.Comm, k.Stream = send, recv, count, dt, c, s
	return nil
}

// AllGather records a call of ncclAllGather; it always succeeds.
func (b *CallBatch) AllGather(send, recv Ptr, sendCount uint64, dt DataType, c Comm, s Stream) error {
	k := b.add(FnAllGather, 0)
	k.Send, k.Recv, k.Count, k.Type, k.Comm, k.Stream = send, recv, sendCount, dt, c, s
	return nil
}

// ReduceScatter records a call of ncclReduceScatter; it always succeeds.
func (b *CallBatch) ReduceScatter(send, recv Ptr, recvCount uint64, dt DataType, op RedOp, c Comm, s Stream) error {
	k := b.add(FnReduceScatter, 0)
	k.Send, k.Recv, k.Count, k.Type, k.Op, k.Comm, k.Stream = send, recv, recvCount, dt, op, c, s
	return nil
}

// Reduce records a call of ncclReduce; it always succeeds.
func (b *CallBatch) Reduce(send, recv Ptr, count uint64, dt DataType, op RedOp, root int, c Comm, s Stream) error {
	k := b.add(FnReduce, root)
	k.Send, k.Recv, k.Count, k.Type, k.Op, k.Comm, k.Stream = send, recv, count, dt, op, c, s
	return nil
}

// AlltoAll records a call of ncclAlltoAll; it always succeeds.
func (b *CallBatch) AlltoAll(send, recv Ptr, count uint64, dt DataType, c Comm, s Stream) error {
	k := b.add(FnAlltoAll, 0)
	k.Send, k.Recv, k.Count, k.Type, k.Comm, k.Stream = send, recv, count, dt, c, s
	return nil
}

// Gather records a call of ncclGather; it always succeeds.
func (b *CallBatch) Gather(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error {
	k := b.add(FnGather, root)
	k.Send, k.Recv, k.Count, k.Type, k.Comm, k.Stream = send, recv, count, dt, c, s
	return nil
}

// Scatter records a call of ncclScatter; it always succeeds.
func (b *CallBatch) Scatter(send, recv Ptr, count uint64, dt DataType, root int, c Comm, s Stream) error {
	k := b.add(FnScatter, root)
	k.Send, k.Recv, k.Count, k.Type, k.Comm, k.Stream = send, recv, count, dt, c, s
	return nil
}

// Send records a call of ncclSend; it always succeeds.
func (b *CallBatch) Send(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error {
	k := b.add(FnSend, peer)
	k.Send, k.Count, k.Type, k.Comm, k.Stream = buf, count, dt, c, s
	return nil
}

// Recv records a call of ncclRecv; it always succeeds.
func (b *CallBatch) Recv(buf Ptr, count uint64, dt DataType, peer int, c Comm, s Stream) error {
	k := b.add(FnRecv, peer)
	k.Send, k.Count, k.Type, k.Comm, k.Stream = buf, count, dt, c, s
	return nil
}

// PutSignal records a call of ncclPutSignal (flags 0, the only value NCCL accepts);
// it always succeeds.
func (b *CallBatch) PutSignal(local Ptr, count uint64, dt DataType, peer int, win Handle, offset uint64, sigIdx, ctx int, c Comm, s Stream) error {
	k := b.add(FnPutSignal, peer)
	k.Send, k.Count, k.Type, k.Win, k.Offset, k.SigIdx, k.Ctx, k.Comm, k.Stream = local, count, dt, win, offset, sigIdx, ctx, c, s
	return nil
}

// Signal records a call of ncclSignal (flags 0); it always succeeds.
func (b *CallBatch) Signal(peer, sigIdx, ctx int, c Comm, s Stream) error {
	k := b.add(FnSignal, peer)
	k.SigIdx, k.Ctx, k.Comm, k.Stream = sigIdx, ctx, c, s
	return nil
}

// WaitSignal records a call of ncclWaitSignal with a copy of descs (the record's own
// array, reused by later groups); it always succeeds.
func (b *CallBatch) WaitSignal(descs []SignalDesc, c Comm, s Stream) error {
	k := b.add(FnWaitSignal, 0)
	k.Descs = append(k.Descs[:0], descs...)
	k.Comm, k.Stream = c, s
	return nil
}

// Submit hands the recorded calls to the driver's Submit.
func (b *CallBatch) Submit() (int, error) { return b.submit(b.calls) }

// Reset forgets the calls, keeping the memory.
func (b *CallBatch) Reset() { b.calls = b.calls[:0] }

// Accepts reports whether d is the driver whose Submit the batch calls.
func (b *CallBatch) Accepts(d Driver) bool { return d == b.d }
