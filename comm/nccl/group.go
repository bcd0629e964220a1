package nccl

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/goid"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Group scope.
//
// NCCL keeps its group state per OS thread, for every communicator of the process
// (src/group.cc: the thread-local ncclGroupDepth and the list of communicators with
// deferred work): between ncclGroupStart and the matching ncclGroupEnd, every
// communication call made on that thread, on any communicator, is only recorded, and
// the outermost ncclGroupEnd launches them all. Goroutines are not threads, so comm maps
// the scope like this:
//
//   - GroupStart locks the calling goroutine to its OS thread (runtime.LockOSThread)
//     until the matching GroupEnd, which the same goroutine must call: for the group's
//     life the goroutine is the thread, and comm identifies it by the runtime's
//     goroutine id (goid.ID: one load, no system call), which no other goroutine ever
//     gets, not even after this one ended.
//   - A goroutine that ends inside a group (it returned or panicked between GroupStart
//     and GroupEnd) leaves behind a group that no other goroutine can find: its
//     operations are never submitted (they never reached NCCL) and no later goroutine
//     joins it. Closing a communicator it holds reports it (ErrGroupOpen).
//   - comm tracks open groups process-wide. Every operation of every NCCL communicator
//     asks whether its goroutine has a group open (a single atomic load while no
//     goroutine of the process has one; then the communicator's cached group, or a
//     scan of the groups' owners, without a lock). If one is open, the operation is
//     grouped, whichever communicator opened the group, and a blocking Backend
//     collective leaves its wait to the outermost GroupEnd, which waits for every
//     communicator whose blocking operations it launched.
//   - A grouped operation makes its checks at the call, as outside a group, and then
//     records its NCCL calls in the group's gpulib.Batch (the driver's own form: the
//     array that one C call runs, with the real library) instead of making them:
//     nothing reaches NCCL before the outermost GroupEnd, which submits ncclGroupStart,
//     every recorded call in order and ncclGroupEnd in one crossing (Batch.Submit).
//     NCCL sees the same calls in the same order, on the same thread, as if they had
//     been made one by one inside its group; inner GroupStart/GroupEnd levels only
//     count. An error NCCL finds in one call (an argument it rejects) therefore
//     surfaces at GroupEnd, naming the operation. GroupEnd holds every member (its
//     lifecycle lock shared, its driver lock) while it submits, and submits nothing
//     when a member was closed or re-created meanwhile by another goroutine.
//   - Operations that cannot be part of a group (they wait, allocate, order streams
//     with events or re-create the communicator: Sync, Barrier, RecvCommandU32,
//     AllReduceAsync, SymmetricAlloc, Split, ...) fail with ErrGroupOpen on a
//     goroutine with a group open, and the two-rank path never launches its kernel
//     inside a group (grouped all-reduces take ncclAllReduce).
//   - A goroutine without a group is never affected by another goroutine's group, as
//     with two threads under NCCL.

// threadGroup is one goroutine's (its locked thread's) group: open while openers is
// not empty. A goroutine takes a free one at its outermost GroupStart (first the one
// taken last, usually its own from its previous group) and frees it once the group is
// submitted, so that a warm group allocates nothing and takes no lock.
type threadGroup struct {
	// owner is the goid.ID of the goroutine holding the group, 0 while it is free:
	// the owner takes it from 0 and gives it back, and only the owner reads or changes
	// the fields below, so a goroutine that reads its own key here owns it.
	owner atomic.Uint64

	openers []*Communicator // who opened each level, outermost first; empty once ended
	members []groupMember   // communicators with operations in the group
	last    int             // index in members of the last one that recorded
	batch   gpulib.Batch    // the recorded NCCL calls, in order
	meta    []callMeta      // the operation behind each recorded call
	rec     recorder        // where the current operation's calls go
	// discarded says a DiscardGroup inside a Group's Add discarded the group.
	discarded bool
	// frCalls are the flight records of the calls of members whose recorder is on, in
	// order, and frMeta their indexes in meta; frOne is the reusable list of one
	// member's, when the group holds several. They are the group's, not each
	// communicator's: a communicator can have calls in the groups of several
	// goroutines at once.
	frCalls []flightrec.Call
	frMeta  []int32
	frOne   []flightrec.Call
}

// groupMember is a communicator with operations in a group; wait says that one was a
// blocking Backend collective, whose wait the outermost GroupEnd does. comm is its
// NCCL handle when it joined: GroupEnd submits nothing for a handle that has ended.
type groupMember struct {
	c    *Communicator
	comm gpulib.Comm
	wait bool
}

// callMeta names the operation that recorded a call, for GroupEnd's error.
type callMeta struct {
	c     *Communicator
	op    string
	bytes int
	peer  int
}

// groups is the process's group scope. Every group ever made stays in all, free or
// held (as many as goroutines ever had one open at once), so finding the calling
// goroutine's group is a scan of owners without a lock, and usually one load (last).
var groups struct {
	open atomic.Int32                   // goroutines with a group open
	last atomic.Pointer[threadGroup]    // the group taken last
	all  atomic.Pointer[[]*threadGroup] // every group; replaced, never changed, under mu
	mu   sync.Mutex
}

// findGroup returns the open group of the goroutine with key me, nil without one.
func findGroup(me uint64) *threadGroup {
	tg := groups.last.Load()
	if tg == nil || tg.owner.Load() != me {
		tg = nil
		if all := groups.all.Load(); all != nil {
			for _, g := range *all {
				if g.owner.Load() == me {
					tg = g
					break
				}
			}
		}
	}
	if tg == nil || len(tg.openers) == 0 { // held but ended: being submitted
		return nil
	}
	return tg
}

// lookupGroup returns the calling goroutine's open group, nil without one.
func lookupGroup() *threadGroup {
	if groups.open.Load() == 0 {
		return nil
	}
	return findGroup(goid.ID())
}

// groupOf is lookupGroup for an operation of c: c caches the group its last grouped
// operation found, which is the calling goroutine's own while its owner is the caller.
func (c *Communicator) groupOf() *threadGroup {
	if groups.open.Load() == 0 { // inlined: outside groups the check is one load
		return nil
	}
	return c.openGroup()
}

// openGroup is groupOf while some goroutine of the process has a group open.
func (c *Communicator) openGroup() *threadGroup {
	me := goid.ID()
	if tg := c.group.Load(); tg != nil && tg.owner.Load() == me && len(tg.openers) > 0 {
		return tg
	}
	tg := findGroup(me)
	if tg != nil {
		c.group.Store(tg)
	}
	return tg
}

// groupDepth returns the calling goroutine's group depth, 0 without a group.
func groupDepth() int {
	if tg := lookupGroup(); tg != nil {
		return len(tg.openers)
	}
	return 0
}

// join makes c a member of tg, once, and tg.last its index. It refuses c when its
// calls go to another NCCL library (or simulated machine) than the first member's:
// one group's calls are launched by one ncclGroupEnd of one library.
func (tg *threadGroup) join(c *Communicator) error {
	if tg.last < len(tg.members) && tg.members[tg.last].c == c {
		return nil
	}
	for i := range tg.members {
		if tg.members[i].c == c {
			tg.last = i
			return nil
		}
	}
	if len(tg.members) > 0 && !gpulib.SameLibrary(tg.members[0].c.d, c.d) {
		return fmt.Errorf("%w: the group holds operations of another NCCL library or world (one group launches the operations of one only)", comm.ErrUnsupported)
	}
	tg.last = len(tg.members)
	tg.members = append(tg.members, groupMember{c: c, comm: c.comm})
	c.grouped.Add(1)
	return nil
}

// takeGroup gives the goroutine with key me a free group.
func takeGroup(me uint64) *threadGroup {
	if tg := groups.last.Load(); tg != nil && tg.owner.CompareAndSwap(0, me) {
		return tg
	}
	if all := groups.all.Load(); all != nil {
		for _, tg := range *all {
			if tg.owner.CompareAndSwap(0, me) {
				groups.last.Store(tg)
				return tg
			}
		}
	}
	tg := &threadGroup{}
	tg.rec.tg = tg
	tg.owner.Store(me)
	groups.mu.Lock()
	var all []*threadGroup
	if old := groups.all.Load(); old != nil {
		all = append(all, *old...)
	}
	all = append(all, tg)
	groups.all.Store(&all)
	groups.mu.Unlock()
	groups.last.Store(tg)
	return tg
}

// pushGroup opens one level on the calling (locked) goroutine's thread.
func pushGroup(c *Communicator) {
	me := goid.ID()
	tg := lookupGroup()
	if tg == nil {
		tg = takeGroup(me)
		groups.open.Add(1)
	}
	tg.openers = append(tg.openers, c)
	c.opened.Add(1)
}

// popGroup closes the calling goroutine's innermost level. At the outermost one it
// returns the group (ended: no goroutine finds it any more); the caller submits its
// calls and frees it with recycle. ok is false without a group.
func popGroup() (ended *threadGroup, ok bool) {
	tg := lookupGroup()
	if tg == nil {
		return nil, false
	}
	n := len(tg.openers) - 1
	if tg.openers[n] == addLevel { // a Group's Add: not a level the caller opened
		return nil, false
	}
	tg.openers[n].opened.Add(-1)
	tg.openers[n] = nil
	tg.openers = tg.openers[:n]
	if n > 0 {
		return nil, true
	}
	groups.open.Add(-1)
	return tg, true
}

// recycle empties an ended group, keeping its memory, and frees it.
func recycle(tg *threadGroup) {
	empty(tg)
	tg.owner.Store(0) // last: the next owner finds it empty
}

// empty forgets a group's members and calls, keeping its memory.
func empty(tg *threadGroup) {
	for _, m := range tg.members {
		m.c.grouped.Add(-1)
	}
	clear(tg.members)
	tg.members = tg.members[:0]
	tg.last = 0
	if tg.batch != nil {
		tg.batch.Reset()
	}
	clear(tg.meta)
	tg.meta = tg.meta[:0]
	tg.frCalls, tg.frMeta = tg.frCalls[:0], tg.frMeta[:0]
	tg.rec.c, tg.rec.op = nil, ""
}

// groupsOpenedBy reports the levels c opened: on the calling goroutine (which Close can
// end) and on other goroutines.
func groupsOpenedBy(c *Communicator) (here, elsewhere int) {
	all := int(c.opened.Load())
	if all == 0 {
		return 0, 0
	}
	mine := 0
	if tg := lookupGroup(); tg != nil {
		for _, o := range tg.openers {
			if o == c {
				mine++
			}
		}
		if mine > 0 {
			here = len(tg.openers) // ending c's levels ends the whole group
		}
	}
	return here, max(all-mine, 0)
}

// recorder takes an operation's NCCL calls inside a group (ncclOps): it records them in
// the group's batch instead of calling the driver, with the operation behind each.
type recorder struct {
	tg    *threadGroup // the group whose recorder this is
	c     *Communicator
	op    string
	bytes int
}

// to returns the batch the current operation records into: the group's, which the
// driver of the group's first call accepts (kept from the goroutine's last group when
// it does, so that a warm group allocates nothing).
func (r *recorder) to() gpulib.Batch {
	tg := r.tg
	if len(tg.meta) == 0 && (tg.batch == nil || !tg.batch.Accepts(r.c.d)) {
		tg.batch = gpulib.NewBatch(r.c.d)
	}
	return tg.batch
}

// note names the operation behind the call just recorded (err nil), for GroupEnd, and
// keeps its flight record (op of n elements of dt) while the recorder is on: the
// group's launch records each member's calls as one coalesced group (flights).
func (r *recorder) note(peer int, op flightrec.Op, n uint64, dt gpulib.DataType, err error) error {
	if err != nil { // not recorded
		return err
	}
	tg := r.tg
	i := len(tg.meta)
	if i == cap(tg.meta) {
		tg.meta = append(tg.meta, callMeta{})
	} else {
		tg.meta = tg.meta[:i+1]
	}
	m := &tg.meta[i] // field by field: a composite literal would go through the stack
	m.c, m.op, m.bytes, m.peer = r.c, r.op, r.bytes, peer
	if r.c.fr != nil {
		tg.flight(i, op, n, dt, peer, r.c.world)
	}
	return nil
}

// flight keeps the flight record of meta[i], a call of op on n elements of dt (see
// frCall), written in place.
func (tg *threadGroup) flight(i int, op flightrec.Op, n uint64, dt gpulib.DataType, peer, world int) {
	k := len(tg.frCalls)
	if k == cap(tg.frCalls) {
		tg.frCalls = append(tg.frCalls, flightrec.Call{})
	} else {
		tg.frCalls = tg.frCalls[:k+1]
	}
	if !op.IsP2P() {
		peer = 0 // a rooted collective's root is not recorded
	}
	f := &tg.frCalls[k] // field by field, as meta
	f.Op, f.Peer, f.Type = op, peer, frType(dt)
	f.In, f.Out = frSizes(op, n, world)
	tg.frMeta = append(tg.frMeta, int32(i))
}

// flights records, before the launch, each recording member's calls in the group as
// one group in its flight recorder (flightrec.Comm.RecordGroup: one sequence number,
// then a coalesced entry, as PyTorch records a coalesced group), so that a launch
// that hangs is in the dump. The members' mu (their rings' locks) are held.
func (tg *threadGroup) flights() {
	n := len(tg.frCalls)
	if n == 0 {
		return
	}
	first := tg.meta[tg.frMeta[0]].c
	one := true
	for _, i := range tg.frMeta[1:] {
		one = one && tg.meta[i].c == first
	}
	if one { // the usual group: one communicator's calls (RecordGroup records one call as Record does)
		first.fr.RecordGroup(tg.frCalls)
		return
	}
	for _, m := range tg.members {
		if m.c.fr == nil {
			continue
		}
		calls := tg.frOne[:0]
		for k, i := range tg.frMeta {
			if tg.meta[i].c == m.c {
				calls = append(calls, tg.frCalls[k])
			}
		}
		m.c.fr.RecordGroup(calls)
		tg.frOne = calls
	}
}

func (r *recorder) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(0, flightrec.AllReduce, count, dt, r.to().AllReduce(send, recv, count, dt, op, c, s))
}

func (r *recorder) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(root, flightrec.Broadcast, count, dt, r.to().Broadcast(send, recv, count, dt, root, c, s))
}

func (r *recorder) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(0, flightrec.AllGather, sendCount, dt, r.to().AllGather(send, recv, sendCount, dt, c, s))
}

func (r *recorder) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(0, flightrec.ReduceScatter, recvCount, dt, r.to().ReduceScatter(send, recv, recvCount, dt, op, c, s))
}

func (r *recorder) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(root, flightrec.Reduce, count, dt, r.to().Reduce(send, recv, count, dt, op, root, c, s))
}

func (r *recorder) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(0, flightrec.AllToAll, count, dt, r.to().AlltoAll(send, recv, count, dt, c, s))
}

func (r *recorder) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(root, flightrec.Gather, count, dt, r.to().Gather(send, recv, count, dt, root, c, s))
}

func (r *recorder) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(root, flightrec.Scatter, count, dt, r.to().Scatter(send, recv, count, dt, root, c, s))
}

func (r *recorder) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(peer, flightrec.Send, count, dt, r.to().Send(buf, count, dt, peer, c, s))
}

func (r *recorder) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return r.note(peer, flightrec.Recv, count, dt, r.to().Recv(buf, count, dt, peer, c, s))
}

// oneSided returns the group's batch for a one-sided call: every batch of this
// module's drivers records them (gpulib.OneSidedBatch).
func (r *recorder) oneSided() (gpulib.OneSidedBatch, error) {
	if b, ok := r.to().(gpulib.OneSidedBatch); ok {
		return b, nil
	}
	return nil, fmt.Errorf("%w: the driver's group batch cannot record one-sided calls", comm.ErrUnsupported)
}

func (r *recorder) PutSignal(local gpulib.Ptr, bytes uint64, peer int, win gpulib.Handle, offset uint64, sig Signal, c gpulib.Comm, s gpulib.Stream) error {
	b, err := r.oneSided()
	if err != nil {
		return err
	}
	return r.note(peer, flightrec.PutSignal, bytes, gpulib.Uint8, b.PutSignal(local, bytes, gpulib.Uint8, peer, win, offset, sig.Index, sig.Context, c, s))
}

func (r *recorder) Signal(peer int, sig Signal, c gpulib.Comm, s gpulib.Stream) error {
	b, err := r.oneSided()
	if err != nil {
		return err
	}
	return r.note(peer, flightrec.Signal, 0, gpulib.Uint8, b.Signal(peer, sig.Index, sig.Context, c, s))
}

// WaitSignal records the wait (the batch keeps its own copy of descs) and, while the
// flight recorder is on, one wait_signal record per descriptor, as outside a group.
func (r *recorder) WaitSignal(descs []gpulib.SignalDesc, c gpulib.Comm, s gpulib.Stream) error {
	b, err := r.oneSided()
	if err != nil {
		return err
	}
	if err := r.note(int(descs[0].Peer), flightrec.WaitSignal, uint64(descs[0].OpCnt), gpulib.Uint8, b.WaitSignal(descs, c, s)); err != nil {
		return err
	}
	if tg := r.tg; r.c.fr != nil {
		i := int32(len(tg.meta) - 1)
		for _, d := range descs[1:] {
			tg.frCalls = append(tg.frCalls, frCall(flightrec.WaitSignal, uint64(d.OpCnt), gpulib.Uint8, int(d.Peer), r.c.world))
			tg.frMeta = append(tg.frMeta, i)
		}
	}
	return nil
}

// grouped reports whether an operation's calls go into a group.
func grouped(to ncclOps) bool {
	_, ok := to.(*recorder)
	return ok
}

// GroupStart opens an NCCL group on the calling goroutine's OS thread: every NCCL
// operation that goroutine issues up to the matching GroupEnd, on this or any other
// communicator of the process, is launched together by the outermost GroupEnd (see the
// group scope notes in group.go and the package documentation). Groups nest. The
// goroutine stays locked to its OS thread until the matching GroupEnd, which it must
// call itself.
//
// Inside the group each operation makes comm's checks at once and returns their
// errors, as outside one, but its NCCL calls are only recorded: the outermost GroupEnd
// makes ncclGroupStart, all of them in order and ncclGroupEnd in one crossing into the
// library, so an argument NCCL itself rejects is reported by GroupEnd, not by the
// operation.
func (c *Communicator) GroupStart() error {
	if err := c.g.Open(core.OpGroupStart); err != nil {
		return err
	}
	runtime.LockOSThread()
	pushGroup(c)
	return nil
}

// GroupEnd closes the innermost group of the calling goroutine's thread. Closing the
// outermost group launches its operations, on every communicator they were issued on,
// in one crossing into NCCL; if blocking Backend collectives were among them, it then
// waits for those communicators like the collectives would have. Without a group open
// on this thread it fails with ErrGroupNotOpen.
//
// When NCCL rejects one of the recorded calls, it drops the whole group (nothing is
// launched) and GroupEnd returns an *OpError whose Err is the failing operation's own
// *OpError: its name, rank, size and peer, and NCCL's result and text (errors.Is with
// the nccl.Result matches; a fatal result leaves every communicator of the group
// unhealthy, matching ErrUnhealthy).
func (c *Communicator) GroupEnd() error {
	if err := c.g.Open(core.OpGroupEnd); err != nil {
		return err
	}
	ended, ok := popGroup()
	if !ok {
		return &comm.ArgError{Op: core.OpGroupEnd, Rank: c.rank, HasRank: true, Arg: "group depth", Value: 0, Err: comm.ErrGroupNotOpen,
			Reason: "group-end without group-start"}
	}
	if ended == nil { // an inner level: NCCL never sees it
		runtime.UnlockOSThread()
		return nil
	}
	defer recycle(ended)
	return ended.complete(c, runtime.UnlockOSThread)
}

// complete submits an ended group's calls and completes its members' part (see
// GroupEnd); c names the group in errors. unlock runs once the calls are made.
func (tg *threadGroup) complete(c *Communicator, unlock func()) error {
	ended := tg
	failed, err := ended.submit()
	unlock()
	members := ended.members
	if err != nil && (failed != len(ended.meta) || code(err) != gpulib.InProgress) {
		e := &comm.OpError{Op: core.OpGroupEnd, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		if failed >= 0 && failed < len(ended.meta) { // name the operation NCCL rejected
			m := ended.meta[failed]
			op := &comm.OpError{Op: m.op, Bytes: m.bytes, Rank: m.c.rank, GlobalRank: m.c.global, Name: m.c.cfg.Name, Peer: m.peer, Err: err}
			if gpulib.Fatal(code(err)) {
				op.Err = m.c.fail(err)
			}
			e.Err = op
		} else if oe, ok := err.(*comm.OpError); ok && oe.Op == core.OpGroupEnd {
			e = oe // a member's own group-end error: not wrapped in another
		}
		if gpulib.Fatal(code(err)) { // an error inside a group poisons every communicator in it
			for _, m := range members {
				m.c.fail(e)
			}
			c.fail(e)
		}
		return e
	}
	var errs []error
	for _, m := range members {
		if err == nil && !m.wait && len(ended.meta) > 0 {
			continue // submit did its part
		}
		if err := m.c.launched(m.wait, err != nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// submit makes the group's recorded calls (Batch.Submit of the group's batch, which the
// driver of the first call's communicator accepted), holding every member (its
// lifecycle shared, its driver lock) so that none is closed or re-created, and none
// makes another NCCL call, meanwhile. A member that ended since it joined (closed,
// failed, re-created) fails the group before anything is called. It returns
// Batch.Submit's results; after a success it tells the watchdog of the members that
// GroupEnd does not wait for that their work is enqueued.
func (tg *threadGroup) submit() (int, error) {
	if len(tg.meta) == 0 {
		return 0, nil
	}
	ms := tg.members
	if len(ms) > 1 {
		slices.SortFunc(ms, func(a, b groupMember) int { // one lock order for every group
			return cmp.Compare(uintptr(unsafe.Pointer(a.c)), uintptr(unsafe.Pointer(b.c)))
		})
	}
	for i, m := range ms {
		m.c.life.RLock()
		err := m.c.usable(core.OpGroupEnd, -1)
		if err == nil && m.c.comm != m.comm {
			err = &comm.OpError{Op: core.OpGroupEnd, Bytes: -1, Rank: m.c.rank, GlobalRank: m.c.global, Name: m.c.cfg.Name,
				Err: fmt.Errorf("%w: the communicator was re-created inside the group", comm.ErrUnhealthy)}
		}
		if err != nil {
			for _, u := range ms[:i+1] {
				u.c.life.RUnlock()
			}
			return gpulib.SubmitGroupStart, err
		}
	}
	for _, m := range ms {
		m.c.mu.Lock()
	}
	tg.flights()
	failed, err := tg.batch.Submit()
	for _, m := range ms {
		m.c.mu.Unlock()
		if err == nil && !m.wait && m.c.wd != nil { // launched has nothing else to do for it
			m.c.wd.enqueued()
		}
		m.c.life.RUnlock()
	}
	return failed, err
}

// launched completes c's part of a group that its outermost GroupEnd launched: the
// communicator settles when the launch returned ncclInProgress, and blocking
// collectives are waited for.
func (c *Communicator) launched(wait, inProgress bool) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(core.OpGroupEnd, -1); err != nil {
		return err
	}
	if inProgress {
		if err := c.settle(bg, c.comm, bounded); err != nil {
			return &comm.OpError{Op: core.OpGroupEnd, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
	}
	if c.wd != nil {
		c.wd.enqueued()
	}
	if wait {
		last := c.fr.Last()
		err := c.wait(bg, core.OpGroupEnd, -1, bounded)
		if err == nil {
			c.fr.CompletedLater(last)
		}
		return err
	}
	return nil
}

// opDiscardGroup names DiscardGroup in errors.
const opDiscardGroup = "discard-group"

// DiscardGroup ends every group level the calling goroutine has open without submitting
// anything: the operations recorded since the outermost GroupStart never reach NCCL,
// and blocking collectives among them never complete (their buffers are unchanged).
// Every rank must discard the same group, or the others wait in vain for its
// operations. comm.InGroup calls it when its function fails. Inside the function given
// to a Group's Add, it discards that whole Group (see Group.Add). Without a group open
// on the calling goroutine it fails with ErrGroupNotOpen.
func (c *Communicator) DiscardGroup() error {
	levels := 0
	for {
		ended, ok := popGroup()
		if !ok {
			break
		}
		levels++
		runtime.UnlockOSThread()
		if ended != nil {
			recycle(ended)
			break
		}
	}
	if tg := lookupGroup(); tg != nil && tg.openers[len(tg.openers)-1] == addLevel {
		tg.discarded = true // inside a Group's Add: the Group is discarded as a whole
		levels++
	}
	if levels == 0 {
		return &comm.ArgError{Op: opDiscardGroup, Rank: c.rank, HasRank: true, Arg: "group depth", Value: 0, Err: comm.ErrGroupNotOpen,
			Reason: "no group open on this goroutine"}
	}
	return nil
}

// DiscardGroup is Communicator.DiscardGroup.
func (b *Backend) DiscardGroup() error { return b.conn().DiscardGroup() }

// DiscardGroup is Communicator.DiscardGroup.
func (v StreamComm) DiscardGroup() error { return v.c.DiscardGroup() }

// Group values.

// reserved owns the threadGroup of a Group between its Adds: no goroutine finds it and
// no GroupStart takes it.
const reserved = math.MaxUint64

// addLevel is the opener of the level a Group's Add holds open while its function
// runs; GroupEnd never closes it.
var addLevel = &Communicator{}

// Group is an NCCL group as a value (comm.Group): the operations that the functions
// given to Add issue, on any communicators and backends of this package, are added to
// it and launched together, in one cgo crossing (ncclGroupStart, every call in order,
// ncclGroupEnd), by Submit. Nothing reaches NCCL before Submit, and nothing joins the
// group but what Add's functions issue: no other goroutine's operations, ever. Add and
// Submit may be called from different goroutines, one at a time. Submit and Discard
// leave the group empty, ready for the next batch: an engine keeps one Group per
// pattern and a warm one allocates nothing.
//
// A Group that is dropped with operations in it (never submitted or discarded) is
// discarded when the garbage collector finds it (its operations never reach NCCL; a
// warning is logged): it is never inherited by anything.
type Group struct {
	mu     sync.Mutex
	st     *groupState
	adding atomic.Uint64 // the goid.ID of the goroutine running an Add's function, 0 if none
}

// groupState is what a Group's cleanup needs (not the Group itself).
type groupState struct {
	tg     *threadGroup // held (owner reserved) for the Group's life
	failed error        // the first error of an Add's function since the last Submit
}

// NewGroup returns an empty Group.
func NewGroup() *Group {
	st := &groupState{tg: takeGroup(reserved)}
	g := &Group{st: st}
	runtime.AddCleanup(g, func(st *groupState) {
		if len(st.tg.members) > 0 {
			st.tg.members[0].c.cfg.Log.Warn("comm: nccl group dropped without Submit or Discard: discarded",
				"calls", len(st.tg.meta))
		}
		recycle(st.tg)
	}, st)
	return g
}

// NewGroup returns an empty Group (a *Group; see the package's Group). It makes b a
// comm.GroupMaker, so comm.NewGroup(b) gives the same.
func (b *Backend) NewGroup() comm.Group { return NewGroup() }

// NewGroup returns an empty Group (a *Group; see the package's Group). It makes c a
// comm.GroupMaker, so comm.NewGroup(c) gives the same.
func (c *Communicator) NewGroup() comm.Group { return NewGroup() }

// opGroupAdd and opGroupSubmit name a Group's methods in errors.
const (
	opGroupAdd     = "group-add"
	opGroupSubmit  = "group-submit"
	opGroupDiscard = "group-discard"
)

// Add runs f on the calling goroutine with the group open: the NCCL operations f issues
// (on any communicator) are checked at once, as outside a group, and recorded in g;
// blocking Backend collectives return at once and complete in Submit. The calling
// goroutine must not have a group of its own open (GroupStart), and f must issue its
// operations from the calling goroutine. If f fails, Add returns its error and g can
// only be discarded: Submit then discards it and returns that error.
//
// Inside f, GroupStart/GroupEnd and comm.InGroup only add levels to g (nothing is
// launched before Submit); a DiscardGroup there (comm.InGroup's, when its function
// fails) discards g as a whole: Add returns an error saying so, and Submit discards.
// Levels f leaves open are closed and reported (ErrGroupOpen). Calling g's own Add,
// Submit or Discard from f is refused with ErrGroupOpen. If f panics, g is discarded
// (Submit then returns an error saying so), the goroutine leaves the group, and the
// panic continues.
func (g *Group) Add(f func() error) (err error) {
	if err := g.reentered(opGroupAdd); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	if d := groupDepth(); d > 0 {
		return core.GroupOpenErr(opGroupAdd, d)
	}
	tg := st.tg
	me := goid.ID()
	runtime.LockOSThread()
	tg.openers = append(tg.openers, addLevel)
	tg.owner.Store(me)
	groups.open.Add(1)
	g.adding.Store(me)
	returned := false
	defer func() { // also when f panics: the goroutine leaves the group either way
		g.adding.Store(0)
		left := len(tg.openers) - 1 // levels f opened and left open
		for _, o := range tg.openers[1:] {
			o.opened.Add(-1)
			runtime.UnlockOSThread() // each GroupStart locked the thread once more
		}
		clear(tg.openers)
		tg.openers = tg.openers[:0]
		discarded := tg.discarded
		tg.discarded = false
		groups.open.Add(-1)
		tg.owner.Store(reserved)
		runtime.UnlockOSThread()
		if !returned {
			empty(tg)
			st.failed = errAddPanicked
			return
		}
		if left > 0 {
			err = errors.Join(err, core.GroupOpenErr(opGroupAdd, left))
		}
		if discarded {
			err = errors.Join(err, errDiscardedInAdd)
		}
		if err != nil && st.failed == nil {
			st.failed = err
		}
	}()
	err = f()
	returned = true
	return err
}

// errAddPanicked and errDiscardedInAdd are why a Group was discarded in an Add.
var (
	errAddPanicked    = errors.New("the function given to group-add panicked: the group was discarded")
	errDiscardedInAdd = fmt.Errorf("%s: the group was discarded inside the function given to it (discard-group)", opGroupAdd)
)

// reentered refuses op when the calling goroutine is running one of g's Add functions:
// g is held by that Add until f returns.
func (g *Group) reentered(op string) error {
	if a := g.adding.Load(); a != 0 && a == goid.ID() {
		return &comm.ArgError{Op: op, Arg: "group", Value: 1, Err: comm.ErrGroupOpen,
			Reason: "called from inside the same group's group-add"}
	}
	return nil
}

// Submit launches the group's operations in one crossing into NCCL and completes them
// like the outermost GroupEnd (it waits for the blocking Backend collectives among
// them), or, after an Add whose function failed, discards them and returns that error.
// An empty group does nothing. The group is empty afterwards, either way.
func (g *Group) Submit() error {
	if err := g.reentered(opGroupSubmit); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st
	tg := st.tg
	if failed := st.failed; failed != nil {
		st.failed = nil
		empty(tg)
		return fmt.Errorf("%s: group discarded: %w", opGroupSubmit, failed)
	}
	if len(tg.members) == 0 {
		return nil
	}
	defer empty(tg)
	runtime.LockOSThread()
	return tg.complete(tg.members[0].c, runtime.UnlockOSThread)
}

// Discard empties the group without launching anything: its operations never reach
// NCCL. Every rank must discard the same operations.
func (g *Group) Discard() error {
	if err := g.reentered(opGroupDiscard); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st.failed = nil
	empty(g.st.tg)
	return nil
}

var _ comm.Group = (*Group)(nil)
