package rawdriver

import (
	"errors"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// simInfoMagic is the magic of nccl.h's NCCL_SIM_INFO_INITIALIZER: NCCL refuses a sim
// info without it (ncclInvalidArgument).
const simInfoMagic = 0x74685283

// newSimInfo is NCCL_SIM_INFO_INITIALIZER: its size, magic, version and an undefined
// estimate (-1).
func newSimInfo() nccl.SimInfo {
	var v int32
	_ = nccl.GetVersion(&v) // the version field is informative: NCCL reads size and magic
	return nccl.SimInfo{Size: uint64(unsafe.Sizeof(nccl.SimInfo{})), Magic: simInfoMagic, Version: uint32(v), EstimatedTime: -1}
}

// GroupSimulateEnd is ncclGroupSimulateEnd (gpulib.GroupSimulator): NCCL's estimate in
// microseconds, negative when it made none.
func (d *Driver) GroupSimulateEnd() (float32, error) {
	info := newSimInfo()
	if err := nccl.GroupSimulateEnd(&info); err != nil {
		return -1, ncclErr(err)
	}
	return info.EstimatedTime, nil
}

// SimulateGroup is gpulib.GroupSimulator's: the calls recorded into a reused Batch and
// simulated.
func (d *Driver) SimulateGroup(calls []gpulib.Call) (int, float32, error) {
	b := getBatch()
	defer putBatch(b)
	if err := b.Record(calls); err != nil {
		return gpulib.SubmitGroupStart, -1, err
	}
	return b.Simulate()
}

// Simulate is gpulib.Simulator's: ncclGroupStart and the recorded calls in one cgo
// crossing, then ncclGroupSimulateEnd in a second (its sim info is a typed pointer,
// which a batch record does not hold). The recorded calls stay in b: a later Submit
// makes them again and launches them. The caller keeps its goroutine locked to the
// thread between the two crossings (NCCL's group state is the thread's).
func (b *Batch) Simulate() (int, float32, error) {
	if err := b.start(); err != nil {
		return gpulib.SubmitGroupStart, -1, err
	}
	err := b.run()
	n := b.raw.Len() - 1
	failed, first := n, error(nil)
	if err != nil {
		var be *nccl.BatchError
		if !errors.As(err, &be) {
			return gpulib.SubmitGroupStart, -1, err // nothing was called
		}
		if be.Index == 0 {
			return gpulib.SubmitGroupStart, -1, batchErr(be.Result, be.Detail())
		}
		for i := be.Index; i <= n; i++ { // the first failure that is not ncclInProgress
			r, _ := b.raw.Result(i)
			if r == nccl.Success || r == nccl.InProgress {
				continue
			}
			detail := ""
			if i == be.Index {
				detail = be.Detail()
			}
			failed, first = i-1, batchErr(r, detail)
			break
		}
	}
	// The group is open on this thread whatever the calls returned: end it.
	info := newSimInfo()
	end := nccl.GroupSimulateEnd(&info)
	if first != nil {
		return failed, -1, first
	}
	if end != nil {
		return n, -1, ncclErr(end)
	}
	return n, info.EstimatedTime, nil
}

var (
	_ gpulib.GroupSimulator = (*Driver)(nil)
	_ gpulib.Simulator      = (*Batch)(nil)
)
