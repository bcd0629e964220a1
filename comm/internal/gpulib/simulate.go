package gpulib

import "fmt"

// GroupSimulator is a Driver with ncclGroupSimulateEnd (NCCL >= 2.22.3): it ends the
// group like GroupEnd but launches nothing and returns NCCL's estimate of the group's
// time in microseconds (ncclSimInfo_t.estimatedTime; negative when NCCL estimated
// none). As in NCCL, a group holding a non-blocking communicator is launched anyway
// (src/group.cc: the non-blocking path does not pass the sim info on); callers refuse
// such groups before.
type GroupSimulator interface {
	GroupSimulateEnd() (float32, error)
	// SimulateGroup is Submit ending with ncclGroupSimulateEnd: the calls are made
	// inside ncclGroupStart … ncclGroupSimulateEnd, nothing is launched, and it returns
	// Submit's (index, error) results and the estimate.
	SimulateGroup(calls []Call) (failed int, usec float32, err error)
}

// Simulator is a Batch that can make its recorded calls inside ncclGroupStart …
// ncclGroupSimulateEnd and keep them, so that a later Submit launches the same calls.
// It returns Submit's (index, error) results and NCCL's estimate in microseconds.
type Simulator interface {
	Simulate() (failed int, usec float32, err error)
}

// Simulate hands the recorded calls to the driver's SimulateGroup and keeps them.
func (b *CallBatch) Simulate() (int, float32, error) {
	gs, ok := b.d.(GroupSimulator)
	if !ok {
		return SubmitGroupStart, -1, fmt.Errorf("driver %T has no ncclGroupSimulateEnd", b.d)
	}
	return gs.SimulateGroup(b.calls)
}

// SimulateEach is SubmitEach ending with ncclGroupSimulateEnd instead of ncclGroupEnd,
// for a GroupSimulator's SimulateGroup. d must be a GroupSimulator.
func SimulateEach(d Driver, calls []Call, driverOf func(*Call) Driver) (int, float32, error) {
	gs, ok := d.(GroupSimulator)
	if !ok {
		return SubmitGroupStart, -1, fmt.Errorf("driver %T has no ncclGroupSimulateEnd", d)
	}
	if err := d.GroupStart(); err != nil {
		return SubmitGroupStart, -1, err
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
	usec, err := gs.GroupSimulateEnd()
	if first != nil {
		return failed, -1, first
	}
	return len(calls), usec, err
}
