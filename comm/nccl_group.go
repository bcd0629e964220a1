package comm

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

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
//     life the goroutine is the thread.
//   - comm tracks open groups process-wide, by thread id. Every operation of every NCCL
//     communicator asks whether its own thread has a group open (a single atomic load
//     while no thread of the process has one). If one is open, the operation is grouped,
//     whichever communicator opened the group: it is enqueued into the group, and a
//     blocking Backend collective leaves its wait to the outermost GroupEnd, which
//     waits for every communicator whose blocking operations it launched.
//   - Operations that cannot be part of a group (they wait, allocate, order streams
//     with events or re-create the communicator: Sync, Barrier, RecvCommandU32,
//     AllReduceAsync, SymmetricAlloc, Split, ...) fail with ErrGroupOpen on a thread
//     with a group open, and the two-rank path never launches its kernel inside a
//     group (grouped all-reduces take ncclAllReduce).
//   - A goroutine without a group is never affected by another goroutine's group, as
//     with two threads under NCCL.
//
// Where the OS has no thread ids (not Linux) every goroutine counts as one thread.

// threadGroup is one thread's open group.
type threadGroup struct {
	openers []*NCCLCommunicator // who opened each level, outermost first
	members []groupMember       // communicators with operations in the group
}

// groupMember is a communicator with operations in a group; wait says that one was a
// blocking Backend collective, whose wait the outermost GroupEnd does.
type groupMember struct {
	c    *NCCLCommunicator
	wait bool
}

// groups is the process's group scope.
var groups struct {
	open     atomic.Int32 // threads with a group open
	mu       sync.Mutex
	byThread map[int]*threadGroup
	free     []*threadGroup // ended groups, for reuse
}

// groupThread returns the calling thread's id and group depth when it has a group
// open, else -1 and 0.
func groupThread() (tid, depth int) {
	if groups.open.Load() == 0 {
		return -1, 0
	}
	tid = threadID()
	groups.mu.Lock()
	tg, ok := groups.byThread[tid]
	if ok {
		depth = len(tg.openers)
	}
	groups.mu.Unlock()
	if !ok {
		return -1, 0
	}
	return tid, depth
}

// joinGroup records that c enqueued an operation in thread tid's group.
func joinGroup(tid int, c *NCCLCommunicator, wait bool) {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	tg := groups.byThread[tid]
	if tg == nil {
		return
	}
	for i := range tg.members {
		if tg.members[i].c == c {
			tg.members[i].wait = tg.members[i].wait || wait
			return
		}
	}
	tg.members = append(tg.members, groupMember{c: c, wait: wait})
	c.grouped.Add(1)
}

// pushGroup opens one level on the calling (locked) thread.
func pushGroup(c *NCCLCommunicator) {
	tid := threadID()
	groups.mu.Lock()
	defer groups.mu.Unlock()
	if groups.byThread == nil {
		groups.byThread = make(map[int]*threadGroup)
	}
	tg := groups.byThread[tid]
	if tg == nil {
		if n := len(groups.free); n > 0 { // reuse: a group allocates nothing once warm
			tg, groups.free = groups.free[n-1], groups.free[:n-1]
		} else {
			tg = &threadGroup{}
		}
		groups.byThread[tid] = tg
		groups.open.Add(1)
	}
	tg.openers = append(tg.openers, c)
}

// popGroup closes the calling thread's innermost level. At the outermost one it
// forgets the group and returns it (ended); the caller reads its members and hands it
// back with recycle. ok is false without a group.
func popGroup() (ended *threadGroup, ok bool) {
	tid := threadID()
	groups.mu.Lock()
	defer groups.mu.Unlock()
	tg := groups.byThread[tid]
	if tg == nil {
		return nil, false
	}
	tg.openers = tg.openers[:len(tg.openers)-1]
	if len(tg.openers) > 0 {
		return nil, true
	}
	delete(groups.byThread, tid)
	groups.open.Add(-1)
	for _, m := range tg.members {
		m.c.grouped.Add(-1)
	}
	return tg, true
}

// recycle keeps an ended group for reuse, so that groups allocate nothing once warm.
func recycle(tg *threadGroup) {
	clear(tg.members)
	tg.members = tg.members[:0]
	clear(tg.openers)
	tg.openers = tg.openers[:0]
	groups.mu.Lock()
	groups.free = append(groups.free, tg)
	groups.mu.Unlock()
}

// groupsOpenedBy reports the levels c opened: on the calling thread (which Close can
// end) and on other threads.
func groupsOpenedBy(c *NCCLCommunicator) (here, elsewhere int) {
	if groups.open.Load() == 0 {
		return 0, 0
	}
	tid := threadID()
	groups.mu.Lock()
	defer groups.mu.Unlock()
	for t, tg := range groups.byThread {
		n := 0
		for _, o := range tg.openers {
			if o == c {
				n++
			}
		}
		switch {
		case n == 0:
		case t == tid:
			here = len(tg.openers) // ending c's levels ends the whole group
		default:
			elsewhere += n
		}
	}
	return here, elsewhere
}

// GroupStart opens an NCCL group (ncclGroupStart) on the calling goroutine's OS thread:
// every NCCL operation that goroutine issues up to the matching GroupEnd, on this or
// any other communicator of the process, is launched together by the outermost
// GroupEnd (see the group scope notes in nccl_group.go and the package documentation).
// Groups nest. The goroutine stays locked to its OS thread until the matching GroupEnd,
// which it must call itself.
func (c *NCCLCommunicator) GroupStart() error {
	if err := c.g.open(opGroupStart); err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := c.d.GroupStart(); err != nil {
		runtime.UnlockOSThread()
		return &OpError{Op: opGroupStart, Bytes: -1, Rank: c.rank, Err: err}
	}
	pushGroup(c)
	return nil
}

// GroupEnd closes the innermost group of the calling goroutine's thread. Closing the
// outermost group launches its operations, on every communicator they were issued on;
// if blocking Backend collectives were among them, it then waits for those
// communicators like the collectives would have. Without a group open on this thread
// it fails with ErrGroupNotOpen.
func (c *NCCLCommunicator) GroupEnd() error {
	if err := c.g.open(opGroupEnd); err != nil {
		return err
	}
	ended, ok := popGroup()
	if !ok {
		return &ArgError{Op: opGroupEnd, Arg: "group depth", Value: 0, Err: ErrGroupNotOpen,
			Reason: "group-end without group-start"}
	}
	err := c.d.GroupEnd()
	runtime.UnlockOSThread()
	if ended == nil { // an inner level
		if err != nil {
			return &OpError{Op: opGroupEnd, Bytes: -1, Rank: c.rank, Err: err}
		}
		return nil
	}
	defer recycle(ended)
	members := ended.members
	if err != nil && code(err) != gpulib.InProgress {
		e := &OpError{Op: opGroupEnd, Bytes: -1, Rank: c.rank, Err: err}
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
		if err := m.c.launched(m.wait, err != nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
