package sim

import (
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// First NCCL versions of the elastic and memory functions.
const (
	sinceGrow    = 22902 // ncclCommGetUniqueId, ncclCommGrow
	sinceSuspend = 22907 // ncclCommSuspend, ncclCommResume, ncclCommMemStats
)

// The simulated machine's NCCL memory per communicator rank: a persistent part
// (device-side communicator structures) that a suspend keeps, and one NCCL_BUFFSIZE
// (4 MiB, NCCL's default) of connection buffers per peer that a suspend releases.
const (
	simPersistBytes = 1 << 20
	simBufferBytes  = 4 << 20
)

var _ gpulib.Elastic = (*Driver)(nil)

func init() {
	CallNames = append(CallNames, "ncclCommGetUniqueId", "ncclCommGrow", "ncclCommSuspend", "ncclCommResume",
		"ncclCommMemStats", "ncclCommInitRankScalable")
}

// elasticState is the World's state of pending grows and scalable initialisations.
// Guarded by World.mu.
type elasticState struct {
	grows    map[*clique]*growth                   // pending ncclCommGrow by parent
	growIDs  map[gpulib.UniqueID]*growth           // ncclCommGetUniqueId's ids not yet used up
	scalable map[gpulib.UniqueID][]gpulib.UniqueID // ncclCommInitRankScalable's lists by first id
}

// growth is one ncclCommGrow of a clique: the existing ranks (keeping their ranks)
// and the newcomers (ranks from the parent's size on) that make the grown
// communicator. Guarded by World.mu.
type growth struct {
	parent  *clique
	id      gpulib.UniqueID
	hasID   bool // ncclCommGetUniqueId was called: newcomers can find it
	n       int  // the grown size, 0 until the first rank arrives
	members map[int]*rankComm
	done    chan struct{}
	err     error
}

// growthLocked returns the pending growth of cl, making one. Caller holds World.mu.
func (w *World) growthLocked(cl *clique) *growth {
	if w.elastic.grows == nil {
		w.elastic.grows = map[*clique]*growth{}
		w.elastic.growIDs = map[gpulib.UniqueID]*growth{}
	}
	g := w.elastic.grows[cl]
	if g == nil {
		g = &growth{parent: cl, members: map[int]*rankComm{}, done: make(chan struct{})}
		w.elastic.grows[cl] = g
	}
	return g
}

// CommGetUniqueID is ncclCommGetUniqueId: the id of c's next grow.
func (d *Driver) CommGetUniqueID(c gpulib.Comm) (gpulib.UniqueID, error) {
	const call = "ncclCommGetUniqueId"
	return locked(d, call, sinceGrow, func(w *World) (gpulib.UniqueID, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err == nil {
			err = rc.readyLocked(call)
		}
		if err != nil {
			return gpulib.UniqueID{}, err
		}
		g := w.growthLocked(rc.cl)
		if g.hasID {
			return gpulib.UniqueID{}, ncclErr(gpulib.InvalidUsage, call, "the previous grow's unique id is not used up yet (every rank must call ncclCommGrow first)")
		}
		g.id, g.hasID = w.newUniqueID(), true
		w.elastic.growIDs[g.id] = g
		return g.id, nil
	})
}

// CommGrow is ncclCommGrow.
func (d *Driver) CommGrow(c gpulib.Comm, nranks int, id *gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommGrow"
	if err := d.enter(call); err != nil {
		return 0, err
	}
	if err := d.needs(call, sinceGrow); err != nil {
		return 0, err
	}
	if err := d.inGroup(call); err != nil {
		return 0, err
	}
	return d.w.commGrow(d.dev, c, nranks, id, rank, cfg)
}

func (w *World) commGrow(d *device, c gpulib.Comm, nranks int, id *gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommGrow"
	if nranks <= 0 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "total ranks must be positive, got %d", nranks)
	}
	w.mu.Lock()
	var g *growth
	newRank := rank
	var devStop <-chan struct{}
	if c != 0 { // an existing rank
		rc, err := w.commLocked(d, c, call)
		if err == nil {
			err = rc.readyLocked(call)
		}
		switch {
		case err != nil:
		case nranks <= rc.cl.n:
			err = ncclErr(gpulib.InvalidArgument, call, "total ranks %d is not more than the current %d", nranks, rc.cl.n)
		case rank != -1:
			err = ncclErr(gpulib.InvalidArgument, call, "existing ranks must pass rank -1, got %d", rank)
		}
		if err != nil {
			w.mu.Unlock()
			return 0, err
		}
		g = w.growthLocked(rc.cl)
		if id != nil && (!g.hasID || g.id != *id) {
			w.mu.Unlock()
			return 0, ncclErr(gpulib.InvalidArgument, call, "unique id is not the one ncclCommGetUniqueId made for this communicator's grow")
		}
		newRank, devStop = rc.rank, rc.dev.stop
	} else { // a newcomer
		var err error
		switch {
		case rank < 0:
			err = ncclErr(gpulib.InvalidArgument, call, "new ranks must pass a rank >= 0, got %d", rank)
		case id == nil:
			err = ncclErr(gpulib.InvalidArgument, call, "new ranks must pass a unique id")
		case rank >= nranks:
			err = ncclErr(gpulib.InvalidArgument, call, "new rank %d exceeds total ranks %d", rank, nranks)
		}
		if err == nil {
			if g = w.elastic.growIDs[*id]; g == nil {
				err = ncclErr(gpulib.SystemError, call, "bootstrap: unique id unknown (not made by ncclCommGetUniqueId of this world, or already used up)")
			}
		}
		if err != nil {
			w.mu.Unlock()
			return 0, err
		}
		if rank < g.parent.n {
			g.err = ncclErr(gpulib.InvalidUsage, call, "new rank %d is the rank of an existing member (the communicator had %d ranks)", rank, g.parent.n)
		}
		devStop = d.stop
	}
	switch {
	case g.err != nil:
	case g.n != 0 && g.n != nranks:
		g.err = ncclErr(gpulib.InvalidUsage, call, "ranks disagree on the grown size: %d and %d", g.n, nranks)
	case g.members[newRank] != nil:
		g.err = ncclErr(gpulib.InvalidUsage, call, "rank %d joined the grow twice", newRank)
	}
	if g.err != nil {
		err := g.err
		w.endGrowthLocked(g)
		w.mu.Unlock()
		return 0, err
	}
	g.n = nranks
	child := w.newRankCommLocked(d, cfg)
	child.rank = newRank
	g.members[newRank] = child
	complete := len(g.members) == g.n
	if complete {
		ncl := newClique(g.n)
		for r, m := range g.members {
			m.cl, m.state = ncl, stReady
			ncl.ranks[r] = m
		}
		ncl.arrived = ncl.n
		close(ncl.ready)
		w.endGrowthLocked(g)
	}
	w.mu.Unlock()
	if !cfg.Blocking {
		if !complete {
			return child.h, inProgress(call, "waiting for the other ranks of the grow")
		}
		return child.h, nil
	}
	var err error
	select {
	case <-g.done:
	case <-devStop:
		err = ncclErr(gpulib.SystemError, call, "device %d stopped while the call waited", d.idx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		err = g.err
	}
	if err != nil {
		delete(w.comms, child.h)
		return 0, err
	}
	return child.h, nil
}

// endGrowthLocked closes g, complete or failed: its id is used up and the parent may
// grow again. Ranks that joined a failed growth report its error. Caller holds
// World.mu.
func (w *World) endGrowthLocked(g *growth) {
	select {
	case <-g.done:
		return
	default:
	}
	if g.err != nil {
		for _, m := range g.members {
			m.asyncErr, m.state = gpulib.InvalidUsage, stReady
		}
	}
	delete(w.elastic.grows, g.parent)
	if g.hasID {
		delete(w.elastic.growIDs, g.id)
	}
	close(g.done)
}

// CommSuspend is ncclCommSuspend: with NCCL_SUSPEND_MEM it waits for the
// communicator's pending work and releases its connection buffers; the communicator
// takes no work until ncclCommResume.
func (d *Driver) CommSuspend(c gpulib.Comm, flags int) error {
	const call = "ncclCommSuspend"
	var (
		idle     chan struct{}
		progress bool
	)
	rc, err := locked(d, call, sinceSuspend, func(w *World) (*rankComm, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err == nil {
			err = rc.readyLocked(call)
		}
		if err != nil || flags&gpulib.SuspendMem == 0 {
			return nil, err
		}
		rc.suspended = true
		idle = rc.idle
		progress = w.inProgressLocked(rc)
		return rc, nil
	})
	if rc == nil {
		return err
	}
	if err := d.w.waitIdle(rc, idle, call); err != nil {
		return err
	}
	if progress {
		return inProgress(call, "suspending (non-blocking communicator)")
	}
	return nil
}

// inProgressLocked makes a non-blocking rc report ncclInProgress for the World's
// WithInProgress polls, as NCCL's suspend and resume do while their group task runs
// (they join the communicator's group; GroupEnd launches them). Caller holds World.mu.
func (w *World) inProgressLocked(rc *rankComm) bool {
	if rc.blocking || w.inProgressPolls == 0 {
		return false
	}
	rc.inProgress = w.inProgressPolls
	return true
}

// CommResume is ncclCommResume.
func (d *Driver) CommResume(c gpulib.Comm) error {
	const call = "ncclCommResume"
	_, err := locked(d, call, sinceSuspend, func(w *World) (struct{}, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return struct{}{}, err
		}
		if !rc.suspended {
			return struct{}{}, ncclErr(gpulib.InvalidUsage, call, "communicator %#x is not suspended", uintptr(c))
		}
		rc.suspended = false
		if err := rc.readyLocked(call); err != nil {
			return struct{}{}, err
		}
		if w.inProgressLocked(rc) {
			return struct{}{}, inProgress(call, "resuming (non-blocking communicator)")
		}
		return struct{}{}, nil
	})
	return err
}

// CommMemStats is ncclCommMemStats. Like NCCL, the byte counts are what NCCL tracks
// for the communicator, suspended or not; StatMemSuspended says whether the
// suspendable part is released.
func (d *Driver) CommMemStats(c gpulib.Comm, stat int) (uint64, error) {
	const call = "ncclCommMemStats"
	return locked(d, call, sinceSuspend, func(w *World) (uint64, error) {
		rc, err := w.commLocked(d.dev, c, call)
		if err != nil {
			return 0, err
		}
		if rc.state == stInit || rc.cl == nil {
			return 0, ncclErr(gpulib.InvalidArgument, call, "communicator %#x still initialising", uintptr(c))
		}
		persist, scratch := uint64(simPersistBytes), uint64(rc.cl.n-1)*simBufferBytes
		switch stat {
		case gpulib.StatMemSuspendable:
			return scratch, nil
		case gpulib.StatMemSuspended:
			if rc.suspended {
				return 1, nil
			}
			return 0, nil
		case gpulib.StatMemPersistent:
			return persist, nil
		case gpulib.StatMemTotal:
			return persist + scratch, nil
		}
		return 0, ncclErr(gpulib.InvalidArgument, call, "stat %d: not an ncclCommMemStat_t", stat)
	})
}
