package sim

import "github.com/ncclgo/ncclgo/comm/internal/gpulib"

// ncclGroupSimulateEnd (NCCL >= 2.22.3), modelled on NCCL's src/group.cc and
// src/enqueue.cc: the outermost call ends the group like ncclGroupEnd, and the group's
// collectives are planned (the tuner picks an algorithm and protocol for each and
// stores its time in ncclSimInfo_t.estimatedTime, so the last collective planned gives
// the estimate; point-to-point operations are not estimated) but nothing is launched:
// no stream work, no sequence number taken, no peer waited for. A group holding a
// non-blocking communicator is launched anyway, as NCCL's non-blocking group path does
// not pass the sim info on (it returns ncclInProgress or launches like ncclGroupEnd).
//
// The time is a model of NCCL's tuner, not a measurement: a ring algorithm over the
// communicator's n ranks on a link of simLinkBytesPerUsec with simStepLatencyUsec per
// step and simBaseLatencyUsec per operation:
//
//	all-reduce       base + 2(n-1)·step + 2(n-1)/n · bytes / bw
//	all-gather,      base +  (n-1)·step +  (n-1)/n · bytes / bw   (bytes: the gathered
//	reduce-scatter                                                 or scattered total)
//	broadcast/reduce base +  (n-1)·step +           bytes / bw   (pipelined chain)
//	all-to-all,      base +  (n-1)·step +  (n-1)/n · bytes / bw
//	gather, scatter
//
// and 0 on one rank. It only lets tests see that larger groups take longer.
const (
	versionGroupSimulate = 22203
	simBaseLatencyUsec   = 5.0
	simStepLatencyUsec   = 1.0
	simLinkBytesPerUsec  = 100e3 // 100 GB/s
)

func init() { CallNames = append(CallNames, "ncclGroupSimulateEnd") }

var _ gpulib.GroupSimulator = (*Driver)(nil)

// GroupSimulateEnd is ncclGroupSimulateEnd: the estimate in microseconds, -1 when the
// group had no collective to plan.
func (d *Driver) GroupSimulateEnd() (float32, error) {
	const call = "ncclGroupSimulateEnd"
	if err := d.needs(call, versionGroupSimulate); err != nil {
		return -1, err
	}
	est, err := locked(d, call, 0, func(w *World) (float32, error) {
		tid := threadID()
		g := w.groups[tid]
		if g == nil {
			return -1, ncclErr(gpulib.InvalidUsage, call, "no group open on this thread (ncclGroupEnd without ncclGroupStart)")
		}
		g.depth--
		if g.depth > 0 {
			return -1, nil // an inner level: NCCL leaves the sim info alone
		}
		delete(w.groups, tid)
		if g.err != nil {
			return -1, g.err // the group is dropped
		}
		for _, t := range g.tasks {
			if _, ok := w.comms[t.rc.h]; !ok || t.rc.stopped {
				return -1, ncclErr(gpulib.InvalidUsage, call, "communicator %#x was aborted or destroyed inside the group", uintptr(t.rc.h))
			}
		}
		if err := p2pOverlap(g.tasks); err != nil {
			return -1, err
		}
		for _, t := range g.tasks {
			if !t.rc.blocking { // NCCL's non-blocking path launches the group
				return -1, w.submitLocked(g.tasks, call)
			}
		}
		est := float32(-1)
		for _, t := range g.tasks {
			if t.coll != nil {
				est = float32(estimateColl(t.coll, t.rc.cl.n))
			}
		}
		return est, nil
	})
	if err != nil {
		return -1, err
	}
	return est, nil
}

// estimateColl is the model's time of one collective on n ranks, in microseconds.
func estimateColl(c *collDesc, n int) float64 {
	if n <= 1 {
		return 0
	}
	bytes := float64(c.count) * float64(elemSize(c.dt))
	steps, factor := float64(n-1), float64(n-1)/float64(n)
	switch c.call {
	case "ncclAllReduce":
		steps, factor = 2*float64(n-1), 2*float64(n-1)/float64(n)
	case "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather", "ncclScatter":
		bytes *= float64(n) // count is per rank
	case "ncclBroadcast", "ncclReduce":
		factor = 1
	}
	return simBaseLatencyUsec + steps*simStepLatencyUsec + factor*bytes/simLinkBytesPerUsec
}

// SimulateGroup is Submit ending with ncclGroupSimulateEnd (gpulib.GroupSimulator).
func (d *Driver) SimulateGroup(calls []gpulib.Call) (int, float32, error) {
	return gpulib.SimulateEach(d, calls, d.driverOf)
}
