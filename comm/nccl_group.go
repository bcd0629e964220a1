package comm

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

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
//     life the goroutine is the thread, and comm identifies it by its goroutine
//     (goid.Key, no system call).
//   - comm tracks open groups process-wide. Every operation of every NCCL communicator
//     asks whether its goroutine has a group open (a single atomic load while no
//     goroutine of the process has one; then the communicator's cached group, or a
//     scan of the open groups under a lock). If one is open, the operation is grouped, whichever communicator
//     opened the group, and a blocking Backend collective leaves its wait to the
//     outermost GroupEnd, which waits for every communicator whose blocking operations
//     it launched.
//   - A grouped operation makes its checks at the call, as outside a group, and then
//     records its NCCL calls in the group (threadGroup.calls) instead of making them:
//     nothing reaches NCCL before the outermost GroupEnd, which submits ncclGroupStart,
//     every recorded call in order and ncclGroupEnd in one crossing (Driver.Submit).
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

// threadGroup is one goroutine's (its locked thread's) open group.
type threadGroup struct {
	// owner is the goid.Key of the goroutine whose group this is, 0 once ended:
	// only the owner changes it, so a goroutine that reads its own key here owns it.
	owner   atomic.Uintptr
	openers []*NCCLCommunicator // who opened each level, outermost first (under groups.mu)

	// The fields below belong to the owner goroutine.
	members []groupMember // communicators with operations in the group
	last    int           // index in members of the last one that recorded
	calls   []gpulib.Call // the recorded NCCL calls, in order
	meta    []callMeta    // the operation behind each call
	rec     recorder      // where the current operation's calls go
}

// groupMember is a communicator with operations in a group; wait says that one was a
// blocking Backend collective, whose wait the outermost GroupEnd does. comm is its
// NCCL handle when it joined: GroupEnd submits nothing for a handle that has ended.
type groupMember struct {
	c    *NCCLCommunicator
	comm gpulib.Comm
	wait bool
}

// callMeta names the operation that recorded a call, for GroupEnd's error.
type callMeta struct {
	c     *NCCLCommunicator
	op    string
	bytes int
	peer  int
}

// groups is the process's group scope.
var groups struct {
	open  atomic.Int32 // goroutines with a group open
	mu    sync.Mutex
	byKey []*threadGroup // the open groups (a handful: one per goroutine inside a group)
	free  []*threadGroup // ended groups, for reuse
	// spare is the group ended last, reused without the lock.
	spare atomic.Pointer[threadGroup]
}

// openLocked returns the open group of the goroutine with key me and its index in
// groups.byKey, (nil, -1) without one. Caller holds groups.mu.
func openLocked(me uintptr) (*threadGroup, int) {
	for i, tg := range groups.byKey {
		if tg.owner.Load() == me {
			return tg, i
		}
	}
	return nil, -1
}

// lookupGroup returns the calling goroutine's open group, nil without one.
func lookupGroup() *threadGroup {
	if groups.open.Load() == 0 {
		return nil
	}
	me := goid.Key()
	groups.mu.Lock()
	tg, _ := openLocked(me)
	groups.mu.Unlock()
	return tg
}

// groupOf is lookupGroup for an operation of c: c caches the group its last grouped
// operation found, which is the calling goroutine's own while its owner is the caller.
func (c *NCCLCommunicator) groupOf() *threadGroup {
	if groups.open.Load() == 0 { // inlined: outside groups the check is one load
		return nil
	}
	return c.openGroup()
}

// openGroup is groupOf while some goroutine of the process has a group open.
func (c *NCCLCommunicator) openGroup() *threadGroup {
	if tg := c.group.Load(); tg != nil && tg.owner.Load() == goid.Key() {
		return tg
	}
	tg := lookupGroup()
	if tg != nil {
		c.group.Store(tg)
	}
	return tg
}

// groupDepth returns the calling goroutine's group depth, 0 without a group.
func groupDepth() int {
	tg := lookupGroup()
	if tg == nil {
		return 0
	}
	groups.mu.Lock()
	defer groups.mu.Unlock()
	return len(tg.openers)
}

// join makes c a member of tg, once, and tg.last its index.
func (tg *threadGroup) join(c *NCCLCommunicator) {
	if tg.last < len(tg.members) && tg.members[tg.last].c == c {
		return
	}
	for i := range tg.members {
		if tg.members[i].c == c {
			tg.last = i
			return
		}
	}
	tg.last = len(tg.members)
	tg.members = append(tg.members, groupMember{c: c, comm: c.comm})
	c.grouped.Add(1)
}

// pushGroup opens one level on the calling (locked) goroutine's thread.
func pushGroup(c *NCCLCommunicator) {
	me := goid.Key()
	spare := groups.spare.Swap(nil)
	groups.mu.Lock()
	defer groups.mu.Unlock()
	tg, _ := openLocked(me)
	if tg == nil {
		switch n := len(groups.free); { // reuse: a group allocates nothing once warm
		case spare != nil:
			tg, spare = spare, nil
		case n > 0:
			tg, groups.free = groups.free[n-1], groups.free[:n-1]
		default:
			tg = &threadGroup{}
		}
		tg.owner.Store(me)
		groups.byKey = append(groups.byKey, tg)
		groups.open.Add(1)
	}
	if spare != nil {
		groups.free = append(groups.free, spare)
	}
	tg.openers = append(tg.openers, c)
}

// popGroup closes the calling goroutine's innermost level. At the outermost one it
// forgets the group and returns it (ended); the caller submits its calls and hands it
// back with recycle. ok is false without a group.
func popGroup() (ended *threadGroup, ok bool) {
	me := goid.Key()
	groups.mu.Lock()
	defer groups.mu.Unlock()
	tg, i := openLocked(me)
	if tg == nil {
		return nil, false
	}
	tg.openers = tg.openers[:len(tg.openers)-1]
	if len(tg.openers) > 0 {
		return nil, true
	}
	last := len(groups.byKey) - 1
	groups.byKey[i] = groups.byKey[last]
	groups.byKey[last] = nil
	groups.byKey = groups.byKey[:last]
	groups.open.Add(-1)
	tg.owner.Store(0)
	return tg, true
}

// recycle keeps an ended group for reuse, so that groups allocate nothing once warm.
func recycle(tg *threadGroup) {
	for _, m := range tg.members {
		m.c.grouped.Add(-1)
	}
	clear(tg.members)
	tg.members = tg.members[:0]
	tg.last = 0
	tg.calls = tg.calls[:0] // no pointers to clear
	clear(tg.meta)
	tg.meta = tg.meta[:0]
	tg.rec = recorder{}
	clear(tg.openers)
	tg.openers = tg.openers[:0]
	if groups.spare.CompareAndSwap(nil, tg) {
		return
	}
	groups.mu.Lock()
	groups.free = append(groups.free, tg)
	groups.mu.Unlock()
}

// groupsOpenedBy reports the levels c opened: on the calling goroutine (which Close can
// end) and on other goroutines.
func groupsOpenedBy(c *NCCLCommunicator) (here, elsewhere int) {
	if groups.open.Load() == 0 {
		return 0, 0
	}
	me := goid.Key()
	groups.mu.Lock()
	defer groups.mu.Unlock()
	for _, tg := range groups.byKey {
		n := 0
		for _, o := range tg.openers {
			if o == c {
				n++
			}
		}
		switch {
		case n == 0:
		case tg.owner.Load() == me:
			here = len(tg.openers) // ending c's levels ends the whole group
		default:
			elsewhere += n
		}
	}
	return here, elsewhere
}

// recorder takes an operation's NCCL calls inside a group (ncclOps): it appends them
// to the group instead of calling the driver, and never fails.
type recorder struct {
	tg    *threadGroup
	c     *NCCLCommunicator
	op    string
	bytes int
}

// add records one call on behalf of the current operation.
func (r *recorder) add(call gpulib.Call) error {
	tg := r.tg
	tg.calls = append(tg.calls, call)
	tg.meta = append(tg.meta, callMeta{c: r.c, op: r.op, bytes: r.bytes, peer: call.Peer})
	return nil
}

func (r *recorder) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnAllReduce, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Comm: c, Stream: s})
}

func (r *recorder) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnBroadcast, Send: send, Recv: recv, Count: count, Type: dt, Peer: root, Comm: c, Stream: s})
}

func (r *recorder) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnAllGather, Send: send, Recv: recv, Count: sendCount, Type: dt, Comm: c, Stream: s})
}

func (r *recorder) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnReduceScatter, Send: send, Recv: recv, Count: recvCount, Type: dt, Op: op, Comm: c, Stream: s})
}

func (r *recorder) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnReduce, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Peer: root, Comm: c, Stream: s})
}

func (r *recorder) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnAlltoAll, Send: send, Recv: recv, Count: count, Type: dt, Comm: c, Stream: s})
}

func (r *recorder) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnGather, Send: send, Recv: recv, Count: count, Type: dt, Peer: root, Comm: c, Stream: s})
}

func (r *recorder) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnScatter, Send: send, Recv: recv, Count: count, Type: dt, Peer: root, Comm: c, Stream: s})
}

func (r *recorder) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnSend, Send: buf, Count: count, Type: dt, Peer: peer, Comm: c, Stream: s})
}

func (r *recorder) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return r.add(gpulib.Call{Fn: gpulib.FnRecv, Send: buf, Count: count, Type: dt, Peer: peer, Comm: c, Stream: s})
}

// grouped reports whether an operation's calls go into a group.
func grouped(to ncclOps) bool {
	_, ok := to.(*recorder)
	return ok
}

// GroupStart opens an NCCL group on the calling goroutine's OS thread: every NCCL
// operation that goroutine issues up to the matching GroupEnd, on this or any other
// communicator of the process, is launched together by the outermost GroupEnd (see the
// group scope notes in nccl_group.go and the package documentation). Groups nest. The
// goroutine stays locked to its OS thread until the matching GroupEnd, which it must
// call itself.
//
// Inside the group each operation makes comm's checks at once and returns their
// errors, as outside one, but its NCCL calls are only recorded: the outermost GroupEnd
// makes ncclGroupStart, all of them in order and ncclGroupEnd in one crossing into the
// library, so an argument NCCL itself rejects is reported by GroupEnd, not by the
// operation.
func (c *NCCLCommunicator) GroupStart() error {
	if err := c.g.open(opGroupStart); err != nil {
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
func (c *NCCLCommunicator) GroupEnd() error {
	if err := c.g.open(opGroupEnd); err != nil {
		return err
	}
	ended, ok := popGroup()
	if !ok {
		return &ArgError{Op: opGroupEnd, Arg: "group depth", Value: 0, Err: ErrGroupNotOpen,
			Reason: "group-end without group-start"}
	}
	if ended == nil { // an inner level: NCCL never sees it
		runtime.UnlockOSThread()
		return nil
	}
	defer recycle(ended)
	failed, err := ended.submit()
	runtime.UnlockOSThread()
	members := ended.members
	if err != nil && (failed != len(ended.calls) || code(err) != gpulib.InProgress) {
		e := &OpError{Op: opGroupEnd, Bytes: -1, Rank: c.rank, Err: err}
		if failed >= 0 && failed < len(ended.calls) { // name the operation NCCL rejected
			m := ended.meta[failed]
			op := &OpError{Op: m.op, Bytes: m.bytes, Rank: m.c.rank, Peer: m.peer, Err: err}
			if gpulib.Fatal(code(err)) {
				op.Err = m.c.fail(err)
			}
			e.Err = op
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
		if err == nil && !m.wait && len(ended.calls) > 0 {
			continue // submit did its part
		}
		if err := m.c.launched(m.wait, err != nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// submit makes the group's recorded calls through the driver of the first call's
// communicator, holding every member (its lifecycle shared, its driver lock) so that none is closed
// or re-created, and none makes another NCCL call, meanwhile. A member that ended since
// it joined (closed, failed, re-created) fails the group before anything is called. It
// returns Driver.Submit's results; after a success it tells the watchdog of the members
// that GroupEnd does not wait for that their work is enqueued.
func (tg *threadGroup) submit() (int, error) {
	if len(tg.calls) == 0 {
		return 0, nil
	}
	ms := tg.members
	slices.SortFunc(ms, func(a, b groupMember) int { // one lock order for every group
		return cmp.Compare(uintptr(unsafe.Pointer(a.c)), uintptr(unsafe.Pointer(b.c)))
	})
	for i, m := range ms {
		m.c.life.RLock()
		err := m.c.usable(opGroupEnd, -1)
		if err == nil && m.c.comm != m.comm {
			err = &OpError{Op: opGroupEnd, Bytes: -1, Rank: m.c.rank,
				Err: fmt.Errorf("%w: the communicator was re-created inside the group", ErrUnhealthy)}
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
	failed, err := tg.meta[0].c.d.Submit(tg.calls)
	for _, m := range ms {
		m.c.mu.Unlock()
		if err == nil && !m.wait && m.c.wd != nil { // launched has nothing else to do for it
			m.c.wd.enqueued()
		}
		m.c.life.RUnlock()
	}
	return failed, err
}

// inGroup reports whether an open group holds operations of c or was opened by it.
func (c *NCCLCommunicator) inGroup() bool {
	if c.grouped.Load() > 0 {
		return true
	}
	here, elsewhere := groupsOpenedBy(c)
	return here+elsewhere > 0
}

// launched completes c's part of a group that its outermost GroupEnd launched: the
// communicator settles when the launch returned ncclInProgress, and blocking
// collectives are waited for.
func (c *NCCLCommunicator) launched(wait, inProgress bool) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(opGroupEnd, -1); err != nil {
		return err
	}
	if inProgress {
		if err := c.settle(bg, c.comm, bounded); err != nil {
			return &OpError{Op: opGroupEnd, Bytes: -1, Rank: c.rank, Err: err}
		}
	}
	if c.wd != nil {
		c.wd.enqueued()
	}
	if wait {
		return c.wait(bg, opGroupEnd, -1, bounded)
	}
	return nil
}
