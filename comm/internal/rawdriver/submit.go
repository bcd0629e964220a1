package rawdriver

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// batches are the Batch values of Submit, kept for reuse so that a warm Submit allocates
// nothing (a sync.Pool would drop them at each GC): spare holds the last one, taken
// without the lock, free the others.
var batches struct {
	spare atomic.Pointer[Batch]
	mu    sync.Mutex
	free  []*Batch
}

func getBatch() *Batch {
	if b := batches.spare.Swap(nil); b != nil {
		return b
	}
	batches.mu.Lock()
	defer batches.mu.Unlock()
	if n := len(batches.free); n > 0 {
		b := batches.free[n-1]
		batches.free = batches.free[:n-1]
		return b
	}
	return new(Batch)
}

func putBatch(b *Batch) {
	if batches.spare.CompareAndSwap(nil, b) {
		return
	}
	batches.mu.Lock()
	batches.free = append(batches.free, b)
	batches.mu.Unlock()
}

// Batch is gpulib.Batch over an nccl.Batch: each call is recorded into the array that
// nccl.Batch.Run hands to C as it is made, after ncclGroupStart, and Submit adds
// ncclGroupEnd and runs the whole group in one cgo crossing. The calls' pointers are
// device memory (see nccl.Batch). Submit once per Reset.
type Batch struct {
	raw nccl.Batch
	// descs are the recorded WaitSignals' descriptors, one array each (kept across
	// Reset for reuse): the records hold their addresses, which the C side reads at
	// run, and run pins them for the crossing (the Go heap does not move them; the pin
	// is cgo's rule for Go memory reached through memory passed to C).
	descs  [][]gpulib.SignalDesc
	nDescs int
}

// run makes the recorded calls in one crossing, the descriptors pinned meanwhile.
func (b *Batch) run() error {
	if b.nDescs == 0 {
		return b.raw.Run()
	}
	var p runtime.Pinner
	defer p.Unpin()
	for _, d := range b.descs[:b.nDescs] {
		p.Pin(&d[0])
	}
	return b.raw.Run()
}

// NewBatch is gpulib.Batcher's: a group recorded straight into an nccl.Batch.
func (d *Driver) NewBatch() gpulib.Batch { return new(Batch) }

// start records ncclGroupStart before the first call.
func (b *Batch) start() error {
	if b.raw.Len() == 0 {
		return b.raw.GroupStart()
	}
	return nil
}

// Reset forgets the recorded calls, keeping the memory.
func (b *Batch) Reset() {
	b.raw.Reset()
	b.nDescs = 0
}

// Accepts reports whether d is a raw driver: every one makes its calls into the same
// loaded libnccl, so a Batch takes the groups of all of them.
func (b *Batch) Accepts(d gpulib.Driver) bool {
	_, ok := d.(*Driver)
	return ok
}

// Len is the number of calls recorded since Reset (ncclGroupStart and ncclGroupEnd
// not counted).
func (b *Batch) Len() int { return max(b.raw.Len()-1, 0) }

// Record resets b and records calls into it, in order.
func (b *Batch) Record(calls []gpulib.Call) error {
	b.Reset()
	if err := b.start(); err != nil {
		return err
	}
	for i := range calls {
		if err := calls[i].Make(b); err != nil {
			return err
		}
	}
	return nil
}

func (b *Batch) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.AllReduce(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.RedOp(op), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Broadcast(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.AllGather(ptr(send), ptr(recv), sendCount, nccl.DataType(dt), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.ReduceScatter(ptr(send), ptr(recv), recvCount, nccl.DataType(dt), nccl.RedOp(op), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Reduce(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.RedOp(op), int32(root), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.AlltoAll(ptr(send), ptr(recv), count, nccl.DataType(dt), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Gather(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Scatter(ptr(send), ptr(recv), count, nccl.DataType(dt), int32(root), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Send(ptr(buf), count, nccl.DataType(dt), int32(peer), nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Recv(ptr(buf), count, nccl.DataType(dt), int32(peer), nccl.Comm(c), nccl.CudaStream(s))
}

var _ gpulib.OneSidedBatch = (*Batch)(nil)

func (b *Batch) PutSignal(local gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, win gpulib.Handle, offset uint64, sigIdx, ctx int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.PutSignal(ptr(local), count, nccl.DataType(dt), int32(peer), nccl.Window(win), offset, int32(sigIdx), int32(ctx), 0, nccl.Comm(c), nccl.CudaStream(s))
}

func (b *Batch) Signal(peer, sigIdx, ctx int, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	return b.raw.Signal(int32(peer), int32(sigIdx), int32(ctx), 0, nccl.Comm(c), nccl.CudaStream(s))
}

// WaitSignal records ncclWaitSignal with the batch's own copy of descs.
func (b *Batch) WaitSignal(descs []gpulib.SignalDesc, c gpulib.Comm, s gpulib.Stream) error {
	if err := b.start(); err != nil {
		return err
	}
	var first unsafe.Pointer
	if len(descs) > 0 {
		if b.nDescs == len(b.descs) {
			b.descs = append(b.descs, nil)
		}
		own := append(b.descs[b.nDescs][:0], descs...)
		b.descs[b.nDescs] = own
		b.nDescs++
		first = unsafe.Pointer(&own[0])
	}
	return b.raw.WaitSignal(int32(len(descs)), first, nccl.Comm(c), nccl.CudaStream(s))
}

// Submit is gpulib.Driver's Submit through a Batch: the whole group in one cgo
// crossing.
func (d *Driver) Submit(calls []gpulib.Call) (int, error) { return Submit(calls) }

// Submit records the group into a reused Batch and submits it (gpulib.Driver's Submit).
func Submit(calls []gpulib.Call) (int, error) {
	b := getBatch()
	defer putBatch(b)
	if err := b.Record(calls); err != nil {
		return gpulib.SubmitGroupStart, err // a missing symbol: nothing was called
	}
	return b.Submit()
}

// Run adds ncclGroupEnd and runs the group in one cgo crossing, returning what
// nccl.Batch.Run returns (its *nccl.BatchError is kept in b: nothing is allocated).
func (b *Batch) Run() error {
	if err := b.start(); err != nil { // an empty group is ncclGroupStart + ncclGroupEnd
		return err
	}
	if err := b.raw.GroupEnd(); err != nil {
		return err
	}
	return b.run()
}

// Submit is Run with gpulib.Driver's Submit results, naming the first recorded call
// that failed. A call that answered ncclInProgress did not fail.
func (b *Batch) Submit() (int, error) {
	err := b.Run()
	n := b.raw.Len() - 2
	if err == nil {
		return n, nil
	}
	var be *nccl.BatchError
	if !errors.As(err, &be) {
		return gpulib.SubmitGroupStart, err // a missing symbol: nothing was called
	}
	if be.Index == 0 {
		return gpulib.SubmitGroupStart, batchErr(be.Result, be.Detail())
	}
	// The first failure in the batch may be a call's ncclInProgress: look past it.
	for i := be.Index; i <= n; i++ {
		r, _ := b.raw.Result(i)
		if r == nccl.Success || r == nccl.InProgress {
			continue
		}
		detail := ""
		if i == be.Index {
			detail = be.Detail()
		} else if s, err := nccl.GetLastError(0); err == nil {
			detail = s
		}
		return i - 1, batchErr(r, detail)
	}
	r, _ := b.raw.Result(n + 1)
	if r == nccl.Success {
		return n, nil
	}
	detail := ""
	if r != nccl.InProgress && be.Index == n+1 {
		detail = be.Detail()
	}
	return n, batchErr(r, detail)
}

// batchErr is the *gpulib.Error of a failed call in a batch, carrying raw's *nccl.Error
// as the other calls' errors do.
func batchErr(r nccl.Result, detail string) error {
	return &gpulib.Error{Code: r, Detail: detail, Err: &nccl.Error{Result: r, Detail: detail}}
}
