package rawdriver

import (
	"runtime"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

var _ gpulib.ScalableInit = (*Driver)(nil)

// CommInitRankScalable is ncclCommInitRankScalable.
func (d *Driver) CommInitRankScalable(nranks int, ids []gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	var pin runtime.Pinner
	defer pin.Unpin()
	uids := make([]nccl.UniqueId, len(ids))
	for i, id := range ids {
		uids[i].Internal = id
	}
	var first *nccl.UniqueId
	if len(uids) > 0 {
		first = &uids[0]
		pin.Pin(first)
	}
	var c nccl.Comm
	err := nccl.CommInitRankScalable(&c, int32(nranks), int32(rank), int32(len(uids)), first, config(cfg, &pin))
	return gpulib.Comm(c), ncclErr(err)
}
