package rawdriver

import (
	"runtime"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

var _ gpulib.Elastic = (*Driver)(nil)

// CommGetUniqueID is ncclCommGetUniqueId.
func (d *Driver) CommGetUniqueID(c gpulib.Comm) (gpulib.UniqueID, error) {
	var id nccl.UniqueId
	err := nccl.CommGetUniqueId(nccl.Comm(c), &id)
	return id.Internal, ncclErr(err)
}

// CommGrow is ncclCommGrow. NCCL writes the new communicator before it returns, also
// on a non-blocking configuration (then with ncclInProgress): the caller waits until
// it leaves that state.
func (d *Driver) CommGrow(c gpulib.Comm, nranks int, id *gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	var uid *nccl.UniqueId
	if id != nil {
		uid = &nccl.UniqueId{Internal: *id}
		pin.Pin(uid)
	}
	child := new(nccl.Comm)
	pin.Pin(child)
	err := nccl.CommGrow(nccl.Comm(c), int32(nranks), uid, int32(rank), child, config(cfg, &pin))
	return gpulib.Comm(*child), ncclErr(err)
}

// CommSuspend is ncclCommSuspend.
func (d *Driver) CommSuspend(c gpulib.Comm, flags int) error {
	return ncclErr(nccl.CommSuspend(nccl.Comm(c), int32(flags)))
}

// CommResume is ncclCommResume.
func (d *Driver) CommResume(c gpulib.Comm) error { return ncclErr(nccl.CommResume(nccl.Comm(c))) }

// CommMemStats is ncclCommMemStats.
func (d *Driver) CommMemStats(c gpulib.Comm, stat int) (uint64, error) {
	var v uint64
	err := nccl.CommMemStats(nccl.Comm(c), nccl.CommMemStat(stat), &v)
	return v, ncclErr(err)
}
