package sim

import (
	"fmt"
	"slices"
	"sort"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// clique is one NCCL communicator as a whole: the ranks that share it. Guarded by
// World.mu.
type clique struct {
	n       int // 0 until the first rank arrives (ncclCommInitRank)
	ranks   []*rankComm
	arrived int
	ready   chan struct{} // closed when every rank has arrived

	err       gpulib.Result // the communicator-wide error (a misuse seen by NCCL)
	errDetail string
	broken    chan struct{} // closed when err is set: pending operations end

	colls   map[uint64]*collSlot
	msgs    map[msgKey]*p2pMsg
	splits  map[uint64]*gather
	shrinks map[uint64]*gather
	wins    map[uint64]*gather
	devs    map[uint64]*gather // ncclDevCommCreate calls waiting for every rank (devapi.go)
	sigs    *sigCounters       // one-sided signals (onesided.go), made by the first
}

func newClique(n int) *clique {
	return &clique{
		n:       n,
		ranks:   make([]*rankComm, n),
		ready:   make(chan struct{}),
		broken:  make(chan struct{}),
		colls:   map[uint64]*collSlot{},
		msgs:    map[msgKey]*p2pMsg{},
		splits:  map[uint64]*gather{},
		shrinks: map[uint64]*gather{},
		wins:    map[uint64]*gather{},
		devs:    map[uint64]*gather{},
	}
}

// failLocked puts the whole communicator in an error state (first error wins) and ends
// its pending operations. Caller holds World.mu.
func (cl *clique) failLocked(code gpulib.Result, detail string) {
	if cl.err != gpulib.Success {
		return
	}
	cl.err, cl.errDetail = code, detail
	close(cl.broken)
}

type commState int

const (
	stInit      commState = iota // waiting for the other ranks
	stReady                      // usable
	stFinalized                  // ncclCommFinalize called
	stRevoked                    // ncclCommRevoke (or a shrink with NCCL_SHRINK_ABORT) called
)

// rankComm is one rank's handle of a clique (an ncclComm_t). Guarded by World.mu.
type rankComm struct {
	h        gpulib.Comm
	cl       *clique // nil while a non-blocking split or shrink has not completed
	rank     int
	dev      *device
	blocking bool
	name     string
	state    commState

	asyncErr   gpulib.Result // this rank's own error (injected, or a device fault)
	inProgress int           // ncclCommGetAsyncError reports InProgress for this many more polls
	busy       int           // non-blocking management calls (split, window) not yet complete
	suspended  bool          // ncclCommSuspend(NCCL_SUSPEND_MEM) without ncclCommResume (elastic.go)

	collSeq, splitSeq, shrinkSeq, winSeq uint64
	sendSeq, recvSeq                     map[int]uint64

	pending int           // operations queued and not finished
	idle    chan struct{} // closed while pending == 0
	stop    chan struct{} // closed by abort, revoke or destroy: pending operations end
	stopped bool
	devStop <-chan struct{} // dev.stop of the device's life the communicator belongs to

	regs map[gpulib.Handle]registration
	wins map[gpulib.Handle]window

	devComms map[*gpulib.DevComm]bool // ncclDevCommCreate's, not yet destroyed (devapi.go)
	devSeq   uint64                   // ncclDevCommCreate calls made

	redOps map[gpulib.RedOp]*preMulOp // ncclRedOpCreatePreMulSum's operators
}

func (w *World) newRankCommLocked(d *device, cfg gpulib.Config) *rankComm {
	idle := make(chan struct{})
	close(idle)
	rc := &rankComm{
		h:        gpulib.Comm(w.handle()),
		dev:      d,
		blocking: cfg.Blocking,
		name:     cfg.Name,
		sendSeq:  map[int]uint64{},
		recvSeq:  map[int]uint64{},
		idle:     idle,
		stop:     make(chan struct{}),
		devStop:  d.stop,
		regs:     map[gpulib.Handle]registration{},
		wins:     map[gpulib.Handle]window{},
	}
	w.comms[rc.h] = rc
	return rc
}

// stopLocked ends rc's pending operations for good. Caller holds World.mu.
func (rc *rankComm) stopLocked() {
	if !rc.stopped {
		rc.stopped = true
		close(rc.stop)
	}
}

func (rc *rankComm) startOpLocked() {
	if rc.pending == 0 {
		rc.idle = make(chan struct{})
	}
	rc.pending++
}

func (w *World) finishOp(rc *rankComm) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc.pending--
	if rc.pending == 0 {
		close(rc.idle)
	}
}

// errorLocked returns the error state of rc (Success if none). Caller holds World.mu.
func (rc *rankComm) errorLocked() (gpulib.Result, string) {
	if rc.asyncErr != gpulib.Success {
		return rc.asyncErr, "asynchronous error on this rank"
	}
	if rc.cl != nil && rc.cl.err != gpulib.Success {
		return rc.cl.err, rc.cl.errDetail
	}
	return gpulib.Success, ""
}

// asyncStateLocked is ncclCommGetAsyncError. Caller holds World.mu.
func (rc *rankComm) asyncStateLocked() gpulib.Result {
	if code, _ := rc.errorLocked(); code != gpulib.Success {
		return code
	}
	switch {
	case rc.state == stInit:
		return gpulib.InProgress
	case rc.inProgress > 0:
		rc.inProgress--
		return gpulib.InProgress
	case rc.busy > 0:
		return gpulib.InProgress
	case (rc.state == stFinalized || rc.state == stRevoked) && rc.pending > 0:
		return gpulib.InProgress
	}
	return gpulib.Success
}

// commLocked finds a communicator handle of driver d's device. Caller holds World.mu.
func (w *World) commLocked(d *device, c gpulib.Comm, call string) (*rankComm, error) {
	rc, ok := w.comms[c]
	if !ok {
		return nil, ncclErr(gpulib.InvalidArgument, call, "communicator %#x does not exist (never created, destroyed or aborted)", uintptr(c))
	}
	if rc.dev != d {
		return nil, ncclErr(gpulib.InvalidArgument, call, "communicator %#x belongs to device %d, not device %d", uintptr(c), rc.dev.idx, d.idx)
	}
	return rc, nil
}

// readyLocked checks that rc can take new work (ncclCommEnsureReady). Caller holds
// World.mu.
func (rc *rankComm) readyLocked(call string) error {
	if code, detail := rc.errorLocked(); code != gpulib.Success {
		return ncclErr(code, call, "communicator %#x is in an error state: %s", uintptr(rc.h), detail)
	}
	switch {
	case rc.state == stInit || rc.inProgress > 0 || rc.busy > 0:
		return ncclErr(gpulib.InvalidArgument, call, "communicator %#x used before its previous call returned ncclSuccess (still in progress)", uintptr(rc.h))
	case rc.state == stFinalized:
		return ncclErr(gpulib.InvalidUsage, call, "communicator %#x was finalized", uintptr(rc.h))
	case rc.state == stRevoked:
		return ncclErr(gpulib.InvalidUsage, call, "communicator %#x was revoked", uintptr(rc.h))
	case rc.suspended:
		return ncclErr(gpulib.InvalidUsage, call, "communicator %#x is suspended (ncclCommSuspend without ncclCommResume)", uintptr(rc.h))
	}
	return nil
}

// waitReady blocks a blocking-mode call until done closes; it fails if the communicator
// breaks, is aborted or the device stops.
func (w *World) waitDone(rc *rankComm, cl *clique, done <-chan struct{}, call string) error {
	select {
	case <-done:
		return nil
	case <-cl.broken:
		w.mu.Lock()
		defer w.mu.Unlock()
		return ncclErr(cl.err, call, "%s", cl.errDetail)
	case <-rc.stop:
		return ncclErr(gpulib.InvalidUsage, call, "communicator %#x was aborted or destroyed while the call waited", uintptr(rc.h))
	case <-rc.devStop:
		return ncclErr(gpulib.SystemError, call, "device %d stopped while the call waited", rc.dev.idx)
	}
}

func (w *World) getUniqueID() gpulib.UniqueID {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := w.newUniqueID()
	w.boots[id] = &clique{}
	return id
}

func (w *World) commInitRank(d *device, nranks int, id gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommInitRankConfig"
	if nranks < 1 {
		return 0, ncclErr(gpulib.InvalidArgument, call, "nranks %d: must be at least 1", nranks)
	}
	if rank < 0 || rank >= nranks {
		return 0, ncclErr(gpulib.InvalidArgument, call, "rank %d out of range [0, %d)", rank, nranks)
	}
	w.mu.Lock()
	cl, ok := w.boots[id]
	if !ok {
		w.mu.Unlock()
		return 0, ncclErr(gpulib.SystemError, call, "bootstrap: unique id unknown (not made by ncclGetUniqueId of this world, or every rank already joined)")
	}
	if cl.n == 0 {
		*cl = *newClique(nranks)
	}
	fail := func(detail string) (gpulib.Comm, error) {
		cl.failLocked(gpulib.InvalidUsage, detail)
		delete(w.boots, id)
		w.mu.Unlock()
		return 0, ncclErr(gpulib.InvalidUsage, call, "%s", detail)
	}
	switch {
	case cl.err != gpulib.Success:
		w.mu.Unlock()
		return 0, ncclErr(cl.err, call, "%s", cl.errDetail)
	case cl.n != nranks:
		return fail(fmt.Sprintf("rank %d gave nranks %d, another rank gave %d", rank, nranks, cl.n))
	case cl.ranks[rank] != nil:
		return fail(fmt.Sprintf("rank %d joined twice", rank))
	}
	for r, other := range cl.ranks {
		if other != nil && other.dev == d {
			return fail(fmt.Sprintf("Duplicate GPU detected: rank %d and rank %d both on device %d", r, rank, d.idx))
		}
	}
	rc := w.newRankCommLocked(d, cfg)
	rc.cl, rc.rank = cl, rank
	cl.ranks[rank] = rc
	cl.arrived++
	complete := cl.arrived == cl.n
	if complete {
		for _, m := range cl.ranks {
			m.state = stReady
		}
		close(cl.ready)
		delete(w.boots, id)
	}
	w.mu.Unlock()
	if !cfg.Blocking {
		if !complete {
			return rc.h, inProgress(call, "waiting for the other ranks")
		}
		return rc.h, nil
	}
	if err := w.waitDone(rc, cl, cl.ready, call); err != nil {
		w.mu.Lock()
		delete(w.comms, rc.h)
		rc.stopLocked()
		w.mu.Unlock()
		return 0, err
	}
	return rc.h, nil
}

// gather assembles one collective management call (split, shrink, window registration)
// from every rank that takes part. Guarded by World.mu.
type gather struct {
	need    int
	entries map[int]any // by rank in the parent
	key     string      // what every rank must agree on (shrink: the exclude list)
	done    chan struct{}
	err     error
}

func newGather(need int, key string) *gather {
	return &gather{need: need, key: key, entries: map[int]any{}, done: make(chan struct{})}
}

type splitEntry struct {
	color, key  int
	child       *rankComm // nil for NCCL_SPLIT_NOCOLOR
	nonblocking bool      // the parent reports InProgress until the split completes
}

func (w *World) commSplit(d *device, c gpulib.Comm, color, key int, cfg gpulib.Config) (gpulib.Comm, error) {
	const call = "ncclCommSplit"
	w.mu.Lock()
	rc, err := w.commLocked(d, c, call)
	if err == nil && rc.state != stRevoked {
		err = rc.readyLocked(call)
	}
	if err == nil && color < -1 {
		err = ncclErr(gpulib.InvalidArgument, call, "color %d: must be >= 0 or NCCL_SPLIT_NOCOLOR (-1)", color)
	}
	if err != nil {
		w.mu.Unlock()
		return 0, err
	}
	cl := rc.cl
	seq := rc.splitSeq
	rc.splitSeq++
	g, ok := cl.splits[seq]
	if !ok {
		g = newGather(cl.n, "")
		cl.splits[seq] = g
	}
	e := splitEntry{color: color, key: key, nonblocking: !cfg.Blocking}
	if color >= 0 {
		e.child = w.newRankCommLocked(d, cfg)
	}
	g.entries[rc.rank] = e
	if e.nonblocking {
		rc.busy++
	}
	complete := len(g.entries) == g.need
	if complete {
		w.completeSplitLocked(cl, seq, g)
	}
	w.mu.Unlock()
	var h gpulib.Comm
	if e.child != nil {
		h = e.child.h
	}
	if !cfg.Blocking {
		if !complete {
			return h, inProgress(call, "waiting for the other ranks")
		}
		return h, nil
	}
	if err := w.waitDone(rc, cl, g.done, call); err != nil {
		return 0, err
	}
	return h, nil
}

func (w *World) completeSplitLocked(cl *clique, seq uint64, g *gather) {
	type member struct {
		parentRank int
		splitEntry
	}
	byColor := map[int][]member{}
	for r, v := range g.entries {
		e := v.(splitEntry)
		if e.child != nil {
			byColor[e.color] = append(byColor[e.color], member{r, e})
		}
	}
	for _, ms := range byColor {
		sort.Slice(ms, func(i, j int) bool {
			if ms[i].key != ms[j].key {
				return ms[i].key < ms[j].key
			}
			return ms[i].parentRank < ms[j].parentRank
		})
		child := newClique(len(ms))
		for i, m := range ms {
			m.child.cl, m.child.rank, m.child.state = child, i, stReady
			child.ranks[i] = m.child
		}
		child.arrived = child.n
		close(child.ready)
	}
	for r, v := range g.entries {
		if v.(splitEntry).nonblocking {
			cl.ranks[r].busy--
		}
	}
	close(g.done)
	delete(cl.splits, seq)
}

func (w *World) commShrink(d *device, c gpulib.Comm, exclude []int, cfg gpulib.Config, flags int) (gpulib.Comm, error) {
	const call = "ncclCommShrink"
	w.mu.Lock()
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		w.mu.Unlock()
		return 0, err
	}
	cl := rc.cl
	detail := ""
	switch {
	case rc.state == stInit || cl == nil:
		detail = "communicator still initialising"
	case rc.state == stFinalized:
		detail = "communicator was finalized"
	case flags != 0 && flags != 1:
		detail = fmt.Sprintf("flags %d: must be NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)", flags)
	}
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	if detail == "" {
		for i, r := range ex {
			switch {
			case r < 0 || r >= cl.n:
				detail = fmt.Sprintf("excluded rank %d out of range [0, %d)", r, cl.n)
			case i > 0 && ex[i-1] == r:
				detail = fmt.Sprintf("rank %d excluded twice", r)
			case r == rc.rank:
				detail = fmt.Sprintf("rank %d excludes itself", r)
			}
		}
		if detail == "" && len(ex) >= cl.n {
			detail = fmt.Sprintf("excluding %d of %d ranks leaves none", len(ex), cl.n)
		}
	}
	if detail != "" {
		w.mu.Unlock()
		return 0, ncclErr(gpulib.InvalidArgument, call, "%s", detail)
	}
	if flags == 1 {
		rc.state = stRevoked
		rc.stopLocked()
	}
	key := fmt.Sprint(ex)
	seq := rc.shrinkSeq
	rc.shrinkSeq++
	g, ok := cl.shrinks[seq]
	if !ok {
		g = newGather(cl.n-len(ex), key)
		cl.shrinks[seq] = g
	}
	if g.key != key && g.err == nil {
		g.err = ncclErr(gpulib.InvalidUsage, call, "ranks disagree on the excluded ranks: %s and %s", g.key, key)
		w.failGatherLocked(g)
	}
	if g.err != nil {
		w.mu.Unlock()
		return 0, g.err
	}
	child := w.newRankCommLocked(d, cfg)
	g.entries[rc.rank] = child
	complete := len(g.entries) == g.need
	if complete {
		survivors := make([]int, 0, g.need)
		for r := range g.entries {
			survivors = append(survivors, r)
		}
		sort.Ints(survivors)
		ncl := newClique(len(survivors))
		for i, r := range survivors {
			m := g.entries[r].(*rankComm)
			m.cl, m.rank, m.state = ncl, i, stReady
			ncl.ranks[i] = m
		}
		ncl.arrived = ncl.n
		close(ncl.ready)
		close(g.done)
		delete(cl.shrinks, seq)
	}
	w.mu.Unlock()
	if !cfg.Blocking {
		if !complete {
			return child.h, inProgress(call, "waiting for the other surviving ranks")
		}
		return child.h, nil
	}
	select {
	case <-g.done:
	case <-rc.devStop:
		err = ncclErr(gpulib.SystemError, call, "device %d stopped while the call waited", rc.dev.idx)
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

// failGatherLocked ends a shrink that cannot complete: every child made so far reports
// the error. Caller holds World.mu.
func (w *World) failGatherLocked(g *gather) {
	code := gpulib.InvalidUsage
	for _, v := range g.entries {
		if m, ok := v.(*rankComm); ok {
			m.asyncErr = code
			m.state = stReady
		}
	}
	close(g.done)
}

func (w *World) commFinalize(d *device, c gpulib.Comm) error {
	const call = "ncclCommFinalize"
	w.mu.Lock()
	rc, err := w.commLocked(d, c, call)
	if err == nil {
		switch rc.state {
		case stInit:
			err = ncclErr(gpulib.InvalidArgument, call, "communicator %#x still initialising", uintptr(c))
		case stFinalized:
			err = ncclErr(gpulib.InvalidUsage, call, "communicator %#x already finalized", uintptr(c))
		case stRevoked:
			err = ncclErr(gpulib.InvalidUsage, call, "communicator %#x was revoked: finalize after revoke is invalid", uintptr(c))
		}
	}
	if err != nil {
		w.mu.Unlock()
		return err
	}
	rc.state = stFinalized
	idle, pending := rc.idle, rc.pending
	w.mu.Unlock()
	if !rc.blocking {
		if pending > 0 {
			return inProgress(call, "%d operations still pending", pending)
		}
		return nil
	}
	return w.waitIdle(rc, idle, call)
}

// waitIdle waits until rc has no pending operation (an abort or revoke ends them
// promptly) or the device stops.
func (w *World) waitIdle(rc *rankComm, idle <-chan struct{}, call string) error {
	select {
	case <-idle:
		return nil
	case <-rc.devStop:
		return ncclErr(gpulib.SystemError, call, "device %d stopped while the call waited", rc.dev.idx)
	}
}

func (w *World) commDestroy(d *device, c gpulib.Comm) error {
	const call = "ncclCommDestroy"
	w.mu.Lock()
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		w.mu.Unlock()
		return err
	}
	idle := rc.idle
	w.mu.Unlock()
	// Without a completed finalize, destroy flushes the pending work first: it hangs
	// while an operation waits for a dead peer.
	if err := w.waitIdle(rc, idle, call); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.comms, c)
	rc.stopLocked()
	return nil
}

func (w *World) commAbort(d *device, c gpulib.Comm) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, "ncclCommAbort")
	if err != nil {
		return err
	}
	delete(w.comms, c)
	rc.stopLocked()
	return nil
}

func (w *World) commRevoke(d *device, c gpulib.Comm, flags int) error {
	const call = "ncclCommRevoke"
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, call)
	switch {
	case err != nil:
		return err
	case flags != 0:
		return ncclErr(gpulib.InvalidArgument, call, "flags %d: must be NCCL_REVOKE_DEFAULT (0)", flags)
	case rc.state == stInit:
		return ncclErr(gpulib.InvalidArgument, call, "communicator %#x still initialising", uintptr(c))
	case rc.state == stFinalized:
		return ncclErr(gpulib.InvalidUsage, call, "communicator %#x was finalized", uintptr(c))
	}
	rc.state = stRevoked
	rc.stopLocked()
	return nil
}

func (w *World) commInfo(d *device, c gpulib.Comm, call string) (count, rank int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		return 0, 0, err
	}
	if rc.state == stInit || rc.cl == nil {
		return 0, 0, ncclErr(gpulib.InvalidArgument, call, "communicator %#x still initialising", uintptr(c))
	}
	return rc.cl.n, rc.rank, nil
}

// lastError is ncclGetLastError of c.
func (w *World) lastError(d *device, c gpulib.Comm) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, "ncclGetLastError")
	if err != nil {
		return ""
	}
	_, detail := rc.errorLocked()
	return detail
}

func (w *World) commGetAsyncError(d *device, c gpulib.Comm) (gpulib.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rc, err := w.commLocked(d, c, "ncclCommGetAsyncError")
	if err != nil {
		return 0, err
	}
	return rc.asyncStateLocked(), nil
}
