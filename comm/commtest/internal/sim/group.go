package sim

import (
	"errors"
	"sync"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// task is one validated communication call waiting to be submitted.
type task struct {
	rc   *rankComm
	s    *stream
	coll *collDesc
	p2p  *p2pDesc
	rma  *rmaDesc // a one-sided call (onesided.go)
}

// groupState is one OS thread's ncclGroupStart/End nesting. NCCL keeps it per thread
// for the whole process (src/group.cc: the thread-local ncclGroupDepth, the group's
// communicators and its first error), so a group opened on one communicator defers the
// calls the same thread makes on every other communicator, of any device, to the
// outermost ncclGroupEnd; another thread is not affected. The World holds one per
// thread with a group open (World.groups, guarded by World.mu): the simulated ranks
// share a process, as the threads of one NCCL process do. Callers lock their goroutine
// to its thread between ncclGroupStart and ncclGroupEnd, as every NCCL user in Go must.
type groupState struct {
	depth int
	tasks []*task
	err   error // the first error of a call inside the group: GroupEnd returns it
}

// The kinds of a group's operations, which NCCL launches in different orders.
const (
	unitColl = iota
	unitRMA
	unitP2P
)

// submitLocked queues tasks as one launch: the operations of each stream become one
// stream op that runs them together (per communicator its one-sided calls first, then
// its collectives in order while every point-to-point operation runs concurrently), so
// the sends and receives of a group progress together as NCCL's do. It returns InProgress when WithInProgress is set and a
// communicator is non-blocking. Caller holds World.mu.
func (w *World) submitLocked(tasks []*task, call string) error {
	type unit struct {
		rc   *rankComm
		run  func() error
		kind int // unitColl, unitRMA or unitP2P
	}
	if recorded, err := w.captureTasksLocked(tasks, call); recorded {
		return err
	}
	var order []*stream
	perStream := map[*stream][]unit{}
	queuedInProgress := false
	for _, t := range tasks {
		rc, cl := t.rc, t.rc.cl
		rc.startOpLocked()
		var u unit
		switch {
		case t.coll != nil:
			seq := rc.collSeq
			rc.collSeq++
			slot, ok := cl.colls[seq]
			if !ok {
				slot = newCollSlot(cl.n)
				cl.colls[seq] = slot
			}
			slot.describeLocked(cl, seq, rc.rank, t.coll)
			desc := t.coll
			u = unit{rc: rc, kind: unitColl, run: func() error { return w.runColl(rc, cl, seq, slot, desc) }}
		case t.rma != nil:
			r := t.rma
			u = unit{rc: rc, kind: unitRMA, run: func() error { return w.runRMA(rc, cl, r) }}
		default:
			key, m := w.attachP2PLocked(rc, t.p2p)
			p := t.p2p
			if p.send {
				u = unit{rc: rc, kind: unitP2P, run: func() error { return w.runSend(rc, cl, key, m, p) }}
			} else {
				u = unit{rc: rc, kind: unitP2P, run: func() error { return w.runRecv(rc, cl, key, m, p) }}
			}
		}
		if _, ok := perStream[t.s]; !ok {
			order = append(order, t.s)
		}
		perStream[t.s] = append(perStream[t.s], u)
		if !rc.blocking && w.inProgressPolls > 0 {
			rc.inProgress = w.inProgressPolls
			queuedInProgress = true
		}
	}
	for _, s := range order {
		units := perStream[s]
		if len(units) == 1 {
			w.enqueueLocked(s, call, units[0].run)
			continue
		}
		w.enqueueLocked(s, "ncclGroupEnd", func() error {
			// Per communicator, as NCCL plans a group (src/enqueue.cc,
			// ncclLaunchPrepare: the one-sided tasks are scheduled before the
			// others): its one-sided calls first, in issue order; then its
			// collectives in order while every point-to-point operation runs
			// concurrently. Communicators progress independently.
			type plan struct{ rma, colls, p2p []func() error }
			plans := map[*rankComm]*plan{}
			var comms []*rankComm
			for _, u := range units {
				p := plans[u.rc]
				if p == nil {
					p = &plan{}
					plans[u.rc] = p
					comms = append(comms, u.rc)
				}
				switch u.kind {
				case unitRMA:
					p.rma = append(p.rma, u.run)
				case unitColl:
					p.colls = append(p.colls, u.run)
				default:
					p.p2p = append(p.p2p, u.run)
				}
			}
			var mu sync.Mutex
			var errs []error
			record := func(err error) {
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
			var wg sync.WaitGroup
			for _, rc := range comms {
				p := plans[rc]
				wg.Go(func() {
					for _, run := range p.rma {
						record(run())
					}
					var rest sync.WaitGroup
					rest.Go(func() {
						for _, run := range p.colls {
							record(run())
						}
					})
					for _, run := range p.p2p {
						rest.Go(func() { record(run()) })
					}
					rest.Wait()
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		})
	}
	if queuedInProgress {
		return inProgress(call, "operations queued; poll ncclCommGetAsyncError")
	}
	return nil
}

// threadGroupLocked returns the calling thread's open group, nil without one. Caller
// holds World.mu.
func (w *World) threadGroupLocked() *groupState {
	return w.groups[threadID()]
}

// communicate validates one communication call and submits it, or adds it to the
// calling thread's open group.
func (d *Driver) communicate(call string, prepare func() (*task, error)) error {
	w := d.w
	d.mu.Lock()
	defer d.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.threadGroupLocked()
	t, err := prepare()
	if err != nil {
		if g != nil && g.err == nil {
			g.err = err
		}
		return err
	}
	if t == nil {
		return nil // a zero-count collective: NCCL discards it
	}
	if g != nil {
		g.tasks = append(g.tasks, t)
		return nil
	}
	return w.submitLocked([]*task{t}, call)
}

func (d *Driver) groupStart() error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	tid := threadID()
	g := w.groups[tid]
	if g == nil {
		g = &groupState{}
		w.groups[tid] = g
	}
	g.depth++
	return nil
}

func (d *Driver) groupEnd() error {
	const call = "ncclGroupEnd"
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	tid := threadID()
	g := w.groups[tid]
	if g == nil {
		return ncclErr(gpulib.InvalidUsage, call, "no group open on this thread (ncclGroupEnd without ncclGroupStart)")
	}
	g.depth--
	if g.depth > 0 {
		return nil
	}
	delete(w.groups, tid)
	if g.err != nil {
		return g.err // the group is dropped: none of its operations is launched
	}
	// Re-check the communicators: one may have been aborted or failed since the call.
	for _, t := range g.tasks {
		if _, ok := w.comms[t.rc.h]; !ok || t.rc.stopped {
			return ncclErr(gpulib.InvalidUsage, call, "communicator %#x was aborted or destroyed inside the group", uintptr(t.rc.h))
		}
	}
	if err := p2pOverlap(g.tasks); err != nil {
		return err
	}
	return w.submitLocked(g.tasks, call)
}

// p2pOverlap reports two receives of the group from different peers into overlapping
// memory of one device: the group's point-to-point operations run concurrently, so on a
// GPU two peers' data race for the same bytes (an all-to-allv whose receive
// displacements collide). Receives from one peer (nccl-tests' aggregated iterations)
// and a receive into the buffer a send of the group reads (nccl-tests' in-place
// sendrecv) are left alone: real programs rely on both.
func p2pOverlap(tasks []*task) error {
	for i, t := range tasks {
		a := t.p2p
		if a == nil || a.send || a.count == 0 {
			continue
		}
		for _, o := range tasks[i+1:] {
			b := o.p2p
			if b == nil || b.send || b.count == 0 || b.peer == a.peer || o.rc.dev != t.rc.dev {
				continue
			}
			na, nb := a.count*uint64(elemSize(a.dt)), b.count*uint64(elemSize(b.dt))
			if spansOverlap(a.buf, na, b.buf, nb) {
				return ncclErr(gpulib.InvalidArgument, "ncclGroupEnd",
					"ncclRecv from rank %d into [%#x, +%d) overlaps the ncclRecv from rank %d into [%#x, +%d) in the same group (a data race on a GPU)",
					a.peer, uint64(a.buf), na, b.peer, uint64(b.buf), nb)
			}
		}
	}
	return nil
}

// inGroup returns an error for calls that cannot be made inside a group (on the
// calling thread).
func (d *Driver) inGroup(call string) error {
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.threadGroupLocked() != nil {
		return ncclErr(gpulib.InvalidUsage, call, "cannot be called between ncclGroupStart and ncclGroupEnd")
	}
	return nil
}
