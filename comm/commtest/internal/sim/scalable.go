package sim

import (
	"slices"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// sinceScalable is the first NCCL with ncclCommInitRankScalable.
const sinceScalable = 22304

var _ gpulib.ScalableInit = (*Driver)(nil)

// CommInitRankScalable is ncclCommInitRankScalable: like ncclCommInitRankConfig, from
// 1 to nranks unique ids that every rank passes in the same order (NCCL spreads the
// bootstrap over their roots; the simulation meets on the first and checks that the
// ranks agree on the list).
func (d *Driver) CommInitRankScalable(nranks int, ids []gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommInitRankScalable"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceScalable); err != nil {
		return 0, err
	}
	if len(ids) < 1 || len(ids) > max(nranks, 1) {
		return 0, ncclErr(gpulib.InvalidArgument, call, "nId %d: must be from 1 to nranks (%d)", len(ids), nranks)
	}
	w := d.w
	w.mu.Lock()
	for i, id := range ids {
		if _, ok := w.boots[id]; !ok {
			w.mu.Unlock()
			return 0, ncclErr(gpulib.SystemError, call, "bootstrap: unique id %d of %d unknown (not made by ncclGetUniqueId of this world, or every rank already joined)", i, len(ids))
		}
	}
	if w.elastic.scalable == nil {
		w.elastic.scalable = map[gpulib.UniqueID][]gpulib.UniqueID{}
	}
	if first, ok := w.elastic.scalable[ids[0]]; !ok {
		w.elastic.scalable[ids[0]] = slices.Clone(ids)
	} else if !slices.Equal(first, ids) {
		w.mu.Unlock()
		return 0, ncclErr(gpulib.InvalidUsage, call, "rank %d passed other unique ids than an earlier rank", rank)
	}
	w.mu.Unlock()
	return w.commInitRank(d.dev, nranks, ids[0], rank, cfg)
}
