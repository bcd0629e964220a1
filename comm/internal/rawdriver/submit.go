package rawdriver

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// batches are the nccl.Batch values of groups being submitted, kept for reuse so that a
// warm Submit allocates nothing (a sync.Pool would drop them at each GC): spare holds
// the last one, taken without the lock, free the others.
var batches struct {
	spare atomic.Pointer[nccl.Batch]
	mu    sync.Mutex
	free  []*nccl.Batch
}

func getBatch() *nccl.Batch {
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
	return new(nccl.Batch)
}

func putBatch(b *nccl.Batch) {
	if batches.spare.CompareAndSwap(nil, b) {
		return
	}
	batches.mu.Lock()
	batches.free = append(batches.free, b)
	batches.mu.Unlock()
}

// Record resets b and records a whole group into it: ncclGroupStart, every call in
// order, ncclGroupEnd (b.Run then makes them in one cgo crossing). The calls' Driver
// fields are not used: every call goes to the loaded libnccl.
func Record(b *nccl.Batch, calls []gpulib.Call) error {
	b.Reset()
	if err := b.GroupStart(); err != nil {
		return err
	}
	for i := range calls {
		if err := record(b, &calls[i]); err != nil {
			return err
		}
	}
	return b.GroupEnd()
}

// record adds one call to b.
func record(b *nccl.Batch, c *gpulib.Call) error {
	dt, cm, s := nccl.DataType(c.Type), nccl.Comm(c.Comm), nccl.CudaStream(c.Stream)
	switch c.Fn {
	case gpulib.FnSend:
		return b.Send(ptr(c.Send), c.Count, dt, int32(c.Peer), cm, s)
	case gpulib.FnRecv:
		return b.Recv(ptr(c.Send), c.Count, dt, int32(c.Peer), cm, s)
	case gpulib.FnAllReduce:
		return b.AllReduce(ptr(c.Send), ptr(c.Recv), c.Count, dt, nccl.RedOp(c.Op), cm, s)
	case gpulib.FnBroadcast:
		return b.Broadcast(ptr(c.Send), ptr(c.Recv), c.Count, dt, int32(c.Peer), cm, s)
	case gpulib.FnReduce:
		return b.Reduce(ptr(c.Send), ptr(c.Recv), c.Count, dt, nccl.RedOp(c.Op), int32(c.Peer), cm, s)
	case gpulib.FnAllGather:
		return b.AllGather(ptr(c.Send), ptr(c.Recv), c.Count, dt, cm, s)
	case gpulib.FnReduceScatter:
		return b.ReduceScatter(ptr(c.Send), ptr(c.Recv), c.Count, dt, nccl.RedOp(c.Op), cm, s)
	case gpulib.FnAlltoAll:
		return b.AlltoAll(ptr(c.Send), ptr(c.Recv), c.Count, dt, cm, s)
	case gpulib.FnGather:
		return b.Gather(ptr(c.Send), ptr(c.Recv), c.Count, dt, int32(c.Peer), cm, s)
	case gpulib.FnScatter:
		return b.Scatter(ptr(c.Send), ptr(c.Recv), c.Count, dt, int32(c.Peer), cm, s)
	}
	return fmt.Errorf("recorded call: unknown function %v", c.Fn)
}

// Submit is gpulib.Driver's Submit through nccl.Batch: the whole group in one cgo
// crossing.
func (d *Driver) Submit(calls []gpulib.Call) (int, error) { return Submit(calls) }

// Submit records the group (see Record) and runs it in one cgo crossing, with
// gpulib.Driver's Submit results. A call that answered ncclInProgress did not fail.
func Submit(calls []gpulib.Call) (int, error) {
	b := getBatch()
	defer putBatch(b)
	if err := Record(b, calls); err != nil {
		return gpulib.SubmitGroupStart, err // a missing symbol: nothing was called
	}
	err := b.Run()
	if err == nil {
		return len(calls), nil
	}
	var be *nccl.BatchError
	if !errors.As(err, &be) {
		return gpulib.SubmitGroupStart, err
	}
	if be.Index == 0 {
		return gpulib.SubmitGroupStart, batchErr(be.Result, be.Detail())
	}
	// The first failure in the batch may be a call's ncclInProgress: look past it.
	for i := be.Index; i <= len(calls); i++ {
		r, _ := b.Result(i)
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
	r, _ := b.Result(len(calls) + 1)
	if r == nccl.Success {
		return len(calls), nil
	}
	detail := ""
	if r != nccl.InProgress && be.Index == len(calls)+1 {
		detail = be.Detail()
	}
	return len(calls), batchErr(r, detail)
}

// batchErr is the *gpulib.Error of a failed call in a batch, carrying raw's *nccl.Error
// as the other calls' errors do.
func batchErr(r nccl.Result, detail string) error {
	return &gpulib.Error{Code: r, Detail: detail, Err: &nccl.Error{Result: r, Detail: detail}}
}
