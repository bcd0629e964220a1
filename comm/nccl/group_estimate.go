package nccl

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// versionGroupSimulate is the first NCCL with ncclGroupSimulateEnd.
const versionGroupSimulate = 22203

// opGroupEstimate names Group.Estimate in errors.
const opGroupEstimate = "group-estimate"

// Estimate returns NCCL's estimate of the time the group's operations take, without
// launching them (ncclGroupSimulateEnd, NCCL >= 2.22.3): the recorded calls are made
// inside ncclGroupStart … ncclGroupSimulateEnd, so NCCL checks them and its tuner
// plans them, but nothing is enqueued, no peer is waited for and no buffer changes.
// The operations stay in g: a later Submit launches them (or Discard drops them), and
// Estimate may be called again. It is local: the other ranks need not call it, and a
// rank that estimates must still Submit or Discard like the others.
//
// The estimate is NCCL's own (ncclSimInfo_t.estimatedTime): the time its tuner gives
// the algorithm and protocol it picks for the group's collectives, which NCCL 2.22 to
// 2.29 report for the last collective they plan; point-to-point operations are not
// estimated. Estimate returns 0 when NCCL made no estimate (an empty group, or only
// sends and receives).
//
// NCCL launches a group of non-blocking communicators even from ncclGroupSimulateEnd
// (its non-blocking path drops the sim info), so Estimate needs every communicator of
// the group to be blocking (WithBlocking(true)) and returns ErrUnsupported otherwise,
// as it does on an NCCL older than 2.22.3. After an Add whose function failed it
// returns that error (the group can only be discarded). NCCL's rejection of a call is
// an *OpError naming the operation, as Submit's (a fatal result leaves the group's
// communicators unhealthy, as Submit's does; the group is kept). The zero Group has nothing to
// estimate (0); a nil *Group is an error (ErrNullPointer).
func (g *Group) Estimate() (time.Duration, error) {
	if g == nil {
		return 0, &comm.ArgError{Op: opGroupEstimate, Arg: "group", Value: nil, Err: comm.ErrNullPointer, Reason: "nil *Group"}
	}
	if err := g.reentered(opGroupEstimate); err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	if st == nil { // the zero Group: nothing was ever added
		return 0, nil
	}
	tg := st.tg
	if st.failed != nil {
		return 0, fmt.Errorf("%s: the group can only be discarded: %w", opGroupEstimate, st.failed)
	}
	if len(tg.meta) == 0 {
		return 0, nil
	}
	for _, m := range tg.members {
		c := m.c
		if c.version < versionGroupSimulate {
			return 0, unsupported(opGroupEstimate, "ncclGroupSimulateEnd", versionGroupSimulate, c.version)
		}
		if !c.cfg.Nccl.Blocking {
			return 0, &comm.ArgError{Op: opGroupEstimate, Arg: "blocking", Value: false, Err: comm.ErrUnsupported,
				Reason: fmt.Sprintf("rank %d: NCCL launches a group of non-blocking communicators from ncclGroupSimulateEnd; make them with WithBlocking(true)", c.rank)}
		}
	}
	sim, ok := tg.batch.(gpulib.Simulator)
	if !ok {
		return 0, fmt.Errorf("%s: %w: the driver cannot simulate a group", opGroupEstimate, comm.ErrUnsupported)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	failed, usec, err := tg.simulate(sim)
	if err != nil {
		e := &comm.OpError{Op: opGroupEstimate, Bytes: -1, Err: err}
		if c := tg.members[0].c; c != nil {
			e.Rank, e.GlobalRank, e.Name = c.rank, c.global, c.cfg.Name
		}
		if failed >= 0 && failed < len(tg.meta) {
			m := tg.meta[failed]
			e.Rank, e.GlobalRank, e.Name = m.c.rank, m.c.global, m.c.cfg.Name
			op := &comm.OpError{Op: m.op, Bytes: m.bytes, Rank: m.c.rank, GlobalRank: m.c.global, Name: m.c.cfg.Name, Peer: m.peer, Err: err}
			if gpulib.Fatal(code(err)) {
				op.Err = m.c.fail(err)
			}
			e.Err = op
		} else if oe, ok := err.(*comm.OpError); ok {
			e = oe
		}
		if gpulib.Fatal(code(err)) { // as Submit: a fatal error inside a group poisons its communicators
			for _, m := range tg.members {
				m.c.fail(e)
			}
		}
		return 0, e
	}
	if usec <= 0 {
		return 0, nil
	}
	return time.Duration(float64(usec) * float64(time.Microsecond)), nil
}

// simulate makes the group's recorded calls inside ncclGroupStart …
// ncclGroupSimulateEnd, holding every member as submit does (its lifecycle shared, its
// driver lock), and keeps them. It records no flight and tells no watchdog anything:
// nothing was launched.
func (tg *threadGroup) simulate(sim gpulib.Simulator) (int, float32, error) {
	ms := tg.members
	if len(ms) > 1 {
		slices.SortFunc(ms, func(a, b groupMember) int { // submit's lock order
			return cmp.Compare(uintptr(unsafe.Pointer(a.c)), uintptr(unsafe.Pointer(b.c)))
		})
	}
	for i, m := range ms {
		m.c.life.RLock()
		err := m.c.usable(opGroupEstimate, -1)
		if err == nil && m.c.comm != m.comm {
			err = &comm.OpError{Op: opGroupEstimate, Bytes: -1, Rank: m.c.rank, GlobalRank: m.c.global, Name: m.c.cfg.Name,
				Err: fmt.Errorf("%w: the communicator was re-created inside the group", comm.ErrUnhealthy)}
		}
		if err != nil {
			for _, u := range ms[:i+1] {
				u.c.life.RUnlock()
			}
			return gpulib.SubmitGroupStart, -1, err
		}
	}
	for _, m := range ms {
		m.c.mu.Lock()
	}
	failed, usec, err := sim.Simulate()
	for _, m := range ms {
		m.c.mu.Unlock()
		m.c.life.RUnlock()
	}
	return failed, usec, err
}
