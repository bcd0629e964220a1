package core

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// guard is comm's one validation layer: argument checks plus the state that makes
// misuse detectable (closed, group depth, live registrations and symmetric
// allocations). Single, NoOp, the NCCL types and the Validate wrapper all call it before
// doing anything, so the same input fails the same way on every backend. Its checks
// never allocate on success.
type Guard struct {
	Rank, World int
	elem        DType
	// align is the element size minus one when elem is valid and its size a power of
	// two (every element type's is), else -1: reduce's one-test fast path uses it as a
	// mask for the multiple-of-size and alignment checks.
	align int

	// closed and depth change under mu; the hot paths read them without it.
	Closed atomic.Bool
	Depth  atomic.Int32
	// scope, when set, is the backend's own group scope (comm/nccl's, not counted in
	// depth): open counts the groups open in the process, read on the fast path, and
	// outside fails for a caller inside one of them.
	scope *groupScope
	// OnlyOps, when set, says that the backend has no reduction operators besides the
	// built-in ones (no PreMulSum) and what they are there: an invalid operator is
	// described with it.
	OnlyOps string

	mu      sync.Mutex
	handles map[BufferHandle]int
	sym     map[DevicePtr]int
	ops     map[ReduceOp]DType // live PreMulSum operators (redop.go), by element type
}

func NewGuard(rank, world int, elem DType) *Guard {
	align := -1
	if s := elem.Size(); s > 0 && s&(s-1) == 0 {
		align = s - 1
	}
	return &Guard{Rank: rank, World: world, elem: elem, align: align}
}

// A nil *Guard is the guard of a zero value (a Communicator or Backend that no
// constructor made): it is closed, and every check that begins an operation fails with
// NotMade's error. Checks that only run after one of those passed need no nil test.

// NotMade is the error of an operation on a zero value: it matches ErrClosed.
func NotMade(op string) error {
	return &ArgError{Op: op, Arg: "communicator", Value: "zero value", Err: ErrClosed,
		Reason: "not made by a constructor"}
}

func (g *Guard) IsClosed() bool { return g == nil || g.Closed.Load() }

func (g *Guard) Open(op string) error {
	if g.IsClosed() { // a nil guard too
		return g.closedErr(op)
	}
	return nil
}

// closedErr is Open's error: NotMade's for a nil guard.
func (g *Guard) closedErr(op string) error {
	if g == nil {
		return NotMade(op)
	}
	return &ArgError{Op: op, Arg: "rank", Value: g.Rank, Err: ErrClosed, Rank: g.Rank, HasRank: true}
}

// outsideGroup fails for operations that cannot run inside a group.
func (g *Guard) OutsideGroup(op string) error {
	if g == nil {
		return NotMade(op)
	}
	if g.Closed.Load() {
		return g.ranked(&ArgError{Op: op, Arg: "rank", Value: g.Rank, Err: ErrClosed})
	}
	if s := g.scope; s != nil {
		if s.open.Load() == 0 { // no group open in the process: one load
			return nil
		}
		return g.ranked(s.outside(op))
	}
	if d := g.Depth.Load(); d > 0 {
		return g.ranked(GroupOpenErr(op, int(d)))
	}
	return nil
}

func checkSize(op string, bytes, elemSize int, t DType) error {
	if bytes < 0 {
		return &ArgError{Op: op, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "negative"}
	}
	if elemSize > 1 && bytes%elemSize != 0 {
		return &ArgError{Op: op, Arg: "bytes", Value: bytes, Err: ErrInvalidSize,
			Reason: fmt.Sprintf("not a multiple of %d (%s)", elemSize, t)}
	}
	return nil
}

// NullPage is the size of the first page of the address space, which Linux never maps
// (vm.mmap_min_addr is at least 4096) and CUDA never allocates from: an address below it
// is a null pointer plus an offset, never a buffer, and no Go pointer may hold one.
const NullPage = 4096

// CheckPtr fails for a null p with bytes > 0, and for any p in the null page.
func CheckPtr(op, arg string, p DevicePtr, bytes int) error {
	if p == 0 && bytes > 0 {
		return &ArgError{Op: op, Arg: arg, Value: p, Err: ErrNullPointer,
			Reason: fmt.Sprintf("with %d bytes", bytes)}
	}
	if p != 0 && p < NullPage {
		return &ArgError{Op: op, Arg: arg, Value: fmt.Sprintf("%#x", uint64(p)), Err: ErrNullPointer,
			Reason: "in the first page of the address space (below 0x1000), where no buffer lies"}
	}
	return nil
}

// checkAlign fails when p is not aligned to the size of element type t.
func checkAlign(op, arg string, p DevicePtr, t DType) error {
	if s := t.Size(); s > 1 && p&DevicePtr(s-1) != 0 { // element sizes are powers of two
		return &ArgError{Op: op, Arg: arg, Value: p, Err: ErrMisaligned,
			Reason: fmt.Sprintf("not a multiple of %d (%s)", s, t)}
	}
	return nil
}

func CheckRank(op, arg string, r, world int) error {
	if r < 0 || r >= world {
		return &ArgError{Op: op, Arg: arg, Value: r, Err: ErrInvalidRank,
			Reason: fmt.Sprintf("world size is %d", world)}
	}
	return nil
}

// checkTotal fails when bytes*world does not fit in an int.
func checkTotal(op string, bytes, world int) error {
	if world > 1 && bytes > math.MaxInt/world {
		return &ArgError{Op: op, Arg: "bytes", Value: bytes, Err: ErrInvalidSize,
			Reason: fmt.Sprintf("times world size %d overflows", world)}
	}
	return nil
}

// reduce checks an element-typed in-place operation of the backend's element type. The
// valid case passes in one test (valid); anything else takes reduceChecks, which makes
// the same checks one by one and says which failed.
func (g *Guard) Reduce(op string, ptr DevicePtr, bytes int) error {
	if g.Valid(ptr, bytes) {
		return nil
	}
	return g.ReduceChecks(op, ptr, bytes)
}

// valid reports, in one test, whether reduceChecks passes: not closed, a valid element
// type, bytes a non-negative multiple of its size, ptr non-null unless bytes is 0, and
// ptr aligned to the element size.
func (g *Guard) Valid(ptr DevicePtr, bytes int) bool {
	if g == nil {
		return false
	}
	a := g.align
	return (a|bytes) >= 0 && (bytes|int(ptr))&a == 0 && (ptr >= NullPage || ptr == 0 && bytes == 0) && !g.Closed.Load()
}

// reduceChecks is reduce's checks in order, each with its own error.
func (g *Guard) ReduceChecks(op string, ptr DevicePtr, bytes int) error {
	if err := g.Open(op); err != nil {
		return g.ranked(err)
	}
	if !g.elem.Valid() {
		return g.ranked(&ArgError{Op: op, Arg: "element type", Value: int32(g.elem), Err: ErrInvalidType})
	}
	if err := checkSize(op, bytes, g.elem.Size(), g.elem); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(op, "ptr", ptr, bytes); err != nil {
		return g.ranked(err)
	}
	return g.ranked(checkAlign(op, "ptr", ptr, g.elem))
}

// reduceAsync is reduce for AllReduceAsync, which cannot sit inside a group (its events
// would be recorded before the group launches the reduction). The valid case passes in
// one test, as in reduce, when no group is open: in the process for NCCL's per-thread
// groups, else on this guard.
func (g *Guard) ReduceAsync(ptr DevicePtr, bytes int) error {
	if g.Valid(ptr, bytes) && g.Ungrouped() {
		return nil
	}
	if err := g.OutsideGroup(OpAllReduceAsync); err != nil {
		return g.ranked(err)
	}
	return g.ReduceChecks(OpAllReduceAsync, ptr, bytes)
}

// ungrouped reports, in one load, that no group is open: in the process for NCCL's
// per-thread groups, else on this guard.
func (g *Guard) Ungrouped() bool {
	if g == nil {
		return true
	}
	if s := g.scope; s != nil {
		return s.open.Load() == 0
	}
	return g.Depth.Load() == 0
}

// gather checks AllGather (reduce false: bytes in any number) and ReduceScatter (reduce
// true: bytes a multiple of the element size).
func (g *Guard) Gather(op string, send, recv DevicePtr, bytes int, reduce bool) error {
	if err := g.Open(op); err != nil {
		return g.ranked(err)
	}
	size := 1
	if reduce {
		if !g.elem.Valid() {
			return g.ranked(&ArgError{Op: op, Arg: "element type", Value: int32(g.elem), Err: ErrInvalidType})
		}
		size = g.elem.Size()
	}
	if err := checkSize(op, bytes, size, g.elem); err != nil {
		return g.ranked(err)
	}
	if err := checkTotal(op, bytes, g.World); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(op, "send", send, bytes); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(op, "recv", recv, bytes); err != nil {
		return g.ranked(err)
	}
	if reduce {
		if err := checkAlign(op, "send", send, g.elem); err != nil {
			return g.ranked(err)
		}
		if err := checkAlign(op, "recv", recv, g.elem); err != nil {
			return g.ranked(err)
		}
	}
	return g.ranked(g.gatherInPlaceOrApart(op, send, recv, bytes, reduce))
}

// gatherInPlaceOrApart checks the buffers of an all-gather (reduce false) or a
// reduce-scatter of bytes per rank: the per-rank buffer is at its in-place position in
// the whole one or apart from it.
func (g *Guard) gatherInPlaceOrApart(op string, send, recv DevicePtr, bytes int, reduce bool) error {
	if reduce {
		return inPlaceOrApart(op, "recv", recv, bytes, "send", send, bytes*g.World, g.Rank*bytes)
	}
	return inPlaceOrApart(op, "send", send, bytes, "recv", recv, bytes*g.World, g.Rank*bytes)
}

func (g *Guard) Broadcast(ptr DevicePtr, bytes, root int) error {
	if err := g.Open(OpBroadcast); err != nil {
		return g.ranked(err)
	}
	if err := checkSize(OpBroadcast, bytes, 1, Uint8); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(OpBroadcast, "ptr", ptr, bytes); err != nil {
		return g.ranked(err)
	}
	return g.ranked(CheckRank(OpBroadcast, "root", root, g.World))
}

func (g *Guard) P2p(op, peerArg string, ptr DevicePtr, bytes, peer int) error {
	// p2pChecks' passing case in one test: bytes >= 0, ptr non-null unless bytes is 0,
	// 0 <= peer < world, not closed.
	if g != nil && bytes >= 0 && (ptr >= NullPage || ptr == 0 && bytes == 0) && peer >= 0 && peer < g.World && !g.Closed.Load() {
		return nil
	}
	return g.P2pChecks(op, peerArg, ptr, bytes, peer)
}

// p2pChecks is p2p's checks in order, each with its own error.
func (g *Guard) P2pChecks(op, peerArg string, ptr DevicePtr, bytes, peer int) error {
	if err := g.Open(op); err != nil {
		return g.ranked(err)
	}
	if err := checkSize(op, bytes, 1, Uint8); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(op, "ptr", ptr, bytes); err != nil {
		return g.ranked(err)
	}
	return g.ranked(CheckRank(op, peerArg, peer, g.World))
}

func (g *Guard) RecvCommand(ptr DevicePtr, root int) error {
	if err := g.OutsideGroup(OpRecvCommand); err != nil {
		return g.ranked(err)
	}
	if err := CheckPtr(OpRecvCommand, "ptr", ptr, 4); err != nil {
		return g.ranked(err)
	}
	if err := CheckRank(OpRecvCommand, "root", root, g.World); err != nil {
		return g.ranked(err)
	}
	if root == g.Rank {
		return g.ranked(&ArgError{Op: OpRecvCommand, Arg: "root", Value: root, Err: ErrInvalidRank,
			Reason: "root is this rank; it sends with broadcast"})
	}
	return nil
}

func (g *Guard) Register(ptr DevicePtr, bytes int) error {
	if err := g.Open(OpRegister); err != nil {
		return g.ranked(err)
	}
	if bytes <= 0 {
		return g.ranked(&ArgError{Op: OpRegister, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "must be positive"})
	}
	return g.ranked(CheckPtr(OpRegister, "ptr", ptr, bytes))
}

// registered records a handle returned by a successful registration. Handles are
// counted: a backend may return the same handle (the default 0) more than once.
func (g *Guard) Registered(h BufferHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handles == nil {
		g.handles = make(map[BufferHandle]int)
	}
	g.handles[h]++
}

// deregister checks and forgets h; undo restores it when the backend then fails.
func (g *Guard) Deregister(h BufferHandle) (undo func(), err error) {
	if g == nil {
		return nil, NotMade(OpDeregister)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Closed.Load() {
		return nil, g.ranked(&ArgError{Op: OpDeregister, Arg: "handle", Value: h, Err: ErrClosed})
	}
	n := g.handles[h]
	if n == 0 {
		return nil, g.ranked(&ArgError{Op: OpDeregister, Arg: "handle", Value: h, Err: ErrUnknownHandle,
			Reason: "not returned by register-buffer or already deregistered"})
	}
	if n == 1 {
		delete(g.handles, h)
	} else {
		g.handles[h] = n - 1
	}
	return func() { g.Registered(h) }, nil
}

// forget drops every registration of h (its communicator ended).
func (g *Guard) Forget(h BufferHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.handles, h)
}

func (g *Guard) SymAlloc(bytes int) error {
	if err := g.OutsideGroup(OpSymmetricAlloc); err != nil {
		return g.ranked(err)
	}
	if bytes <= 0 {
		return g.ranked(&ArgError{Op: OpSymmetricAlloc, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "must be positive"})
	}
	return nil
}

func (g *Guard) Allocated(p DevicePtr, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sym == nil {
		g.sym = make(map[DevicePtr]int)
	}
	g.sym[p] = bytes
}

// symFree checks and forgets p, returning its size; undo restores it when the backend
// then fails.
func (g *Guard) SymFree(p DevicePtr) (bytes int, undo func(), err error) {
	if err := g.OutsideGroup(OpSymmetricFree); err != nil {
		return 0, nil, g.ranked(err)
	}
	if p == 0 {
		return 0, nil, g.ranked(&ArgError{Op: OpSymmetricFree, Arg: "ptr", Value: p, Err: ErrNullPointer})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	bytes, ok := g.sym[p]
	if !ok {
		return 0, nil, g.ranked(&ArgError{Op: OpSymmetricFree, Arg: "ptr", Value: fmt.Sprintf("%#x", uint64(p)),
			Err: ErrUnknownPointer, Reason: "not returned by symmetric-alloc or already freed"})
	}
	delete(g.sym, p)
	return bytes, func() { g.Allocated(p, bytes) }, nil
}

func (g *Guard) Kernel(k Kernel) error {
	if err := g.Open(OpSetAddKernel); err != nil {
		return g.ranked(err)
	}
	if k == 0 {
		return g.ranked(&ArgError{Op: OpSetAddKernel, Arg: "kernel", Value: k, Err: ErrNullPointer})
	}
	return nil
}

func (g *Guard) GroupStart() error {
	if g == nil {
		return NotMade(OpGroupStart)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Closed.Load() {
		return g.ranked(&ArgError{Op: OpGroupStart, Arg: "rank", Value: g.Rank, Err: ErrClosed})
	}
	g.Depth.Add(1)
	return nil
}

// groupEnd closes one group level; outermost reports whether it was the last one.
func (g *Guard) GroupEnd() (outermost bool, err error) {
	if g == nil {
		return false, NotMade(OpGroupEnd)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Closed.Load() {
		return false, g.ranked(&ArgError{Op: OpGroupEnd, Arg: "rank", Value: g.Rank, Err: ErrClosed})
	}
	if g.Depth.Load() == 0 {
		return false, g.ranked(&ArgError{Op: OpGroupEnd, Arg: "group depth", Value: 0, Err: ErrGroupNotOpen,
			Reason: "group-end without group-start"})
	}
	return g.Depth.Add(-1) == 0, nil
}

// close marks the guard closed. It fails with ErrClosed on a second call; openGroups
// reports groups left open, which Close reports with ErrGroupOpen after tearing down.
func (g *Guard) Close() (openGroups int, err error) {
	if g == nil {
		return 0, NotMade(OpClose)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.Closed.Load() {
		return 0, g.ranked(&ArgError{Op: OpClose, Arg: "rank", Value: g.Rank, Err: ErrClosed, Reason: "already closed"})
	}
	g.Closed.Store(true)
	return int(g.Depth.Swap(0)), nil
}

func GroupLeftOpen(depth int) error {
	return &ArgError{Op: OpClose, Arg: "group depth", Value: depth, Err: ErrGroupOpen,
		Reason: "group-start without group-end; the group was dropped"}
}

// typed checks a Communicator operation on count elements of t and returns its size in
// bytes.
func (g *Guard) Typed(op string, count int, t DType) (int, error) {
	if err := g.Open(op); err != nil {
		return 0, g.ranked(err)
	}
	if !t.Valid() {
		return 0, g.ranked(&ArgError{Op: op, Arg: "dtype", Value: int32(t), Err: ErrInvalidType})
	}
	if count < 0 {
		return 0, g.ranked(&ArgError{Op: op, Arg: "count", Value: count, Err: ErrInvalidSize, Reason: "negative"})
	}
	if count > math.MaxInt/t.Size() {
		return 0, g.ranked(&ArgError{Op: op, Arg: "count", Value: count, Err: ErrInvalidSize,
			Reason: fmt.Sprintf("times %d bytes (%s) overflows", t.Size(), t)})
	}
	return count * t.Size(), nil
}

func checkOp(op string, r ReduceOp) error {
	if !r.Valid() {
		return &ArgError{Op: op, Arg: "op", Value: int32(r), Err: ErrInvalidOp,
			Reason: "not sum, prod, max, min or avg"}
	}
	return nil
}

func (g *Guard) TypedReduce(ptr DevicePtr, count int, t DType, r ReduceOp) (int, error) {
	bytes, err := g.Typed(OpAllReduce, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if err := g.checkOp(OpAllReduce, r, t); err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckPtr(OpAllReduce, "ptr", ptr, bytes); err != nil {
		return 0, g.ranked(err)
	}
	return bytes, g.ranked(checkAlign(OpAllReduce, "ptr", ptr, t))
}

// fastCount is the largest count typedReduceValid accepts: count times any element
// size fits an int on every platform, and MPI's int count (2^31-1).
const FastCount = math.MaxInt32 / 8

// typedReduceValid reports, in one test, that typedReduce passes, and returns the size
// in bytes: not closed, a valid element type, one of comm's own operators (a PreMulSum
// operator is not), 0 <= count <= fastCount, ptr non-null unless count is 0 and aligned
// to the element size. A false result says nothing about the input: typedReduce then
// makes the checks one by one and says which failed.
func (g *Guard) TypedReduceValid(ptr DevicePtr, count int, t DType, r ReduceOp) (int, bool) {
	if g == nil || uint32(t) >= uint32(len(DtypeInfo)) || uint32(r) >= uint32(len(opNames)) || uint(count) > FastCount {
		return 0, false
	}
	s := DtypeInfo[t].size
	return count * s, ptr&DevicePtr(s-1) == 0 && (ptr >= NullPage || ptr == 0 && count == 0) && !g.Closed.Load()
}

func (g *Guard) TypedBroadcast(ptr DevicePtr, count int, t DType, root int) (int, error) {
	bytes, err := g.Typed(OpBroadcast, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckPtr(OpBroadcast, "ptr", ptr, bytes); err != nil {
		return 0, g.ranked(err)
	}
	return bytes, g.ranked(CheckRank(OpBroadcast, "root", root, g.World))
}

func (g *Guard) TypedGather(op string, send, recv DevicePtr, count int, t DType, r ReduceOp, reduce bool) (int, error) {
	bytes, err := g.Typed(op, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if reduce {
		if err := g.checkOp(op, r, t); err != nil {
			return 0, g.ranked(err)
		}
	}
	if err := checkTotal(op, bytes, g.World); err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckPtr(op, "send", send, bytes); err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckPtr(op, "recv", recv, bytes); err != nil {
		return 0, g.ranked(err)
	}
	if reduce {
		if err := checkAlign(op, "send", send, t); err != nil {
			return 0, g.ranked(err)
		}
		if err := checkAlign(op, "recv", recv, t); err != nil {
			return 0, g.ranked(err)
		}
	}
	return bytes, g.ranked(g.gatherInPlaceOrApart(op, send, recv, bytes, reduce))
}

func (g *Guard) TypedP2P(op, peerArg string, ptr DevicePtr, count int, t DType, peer int) (int, error) {
	bytes, err := g.Typed(op, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckPtr(op, "ptr", ptr, bytes); err != nil {
		return 0, g.ranked(err)
	}
	return bytes, g.ranked(CheckRank(op, peerArg, peer, g.World))
}

// groupOpenErr is the error of an operation that cannot be part of a group, on a
// thread with depth group levels open (on any communicator).
func GroupOpenErr(op string, depth int) error {
	return &ArgError{Op: op, Arg: "group depth", Value: depth, Err: ErrGroupOpen,
		Reason: "not allowed between group-start and group-end"}
}

// groupScope is a backend's own group scope (see guard.scope).
type groupScope struct {
	open    *atomic.Int32
	outside func(op string) error
}

// useScope makes g check groups in s instead of counting its own levels.
func (g *Guard) UseScope(open *atomic.Int32, outside func(op string) error) {
	g.scope = &groupScope{open: open, outside: outside}
}

// ranked returns err with the guard's rank when it is an *ArgError without one. Small
// enough to be inlined: a passing check pays one comparison.
func (g *Guard) ranked(err error) error {
	if err == nil {
		return nil
	}
	return g.withRank(err)
}

// withRank is ranked's work: a copy of the *ArgError with the rank (a check's error is
// its own, but a copy leaves any shared value alone).
func (g *Guard) withRank(err error) error {
	e, ok := err.(*ArgError)
	if !ok || e.HasRank || g == nil {
		return err
	}
	r := *e
	r.Rank, r.HasRank = g.Rank, true
	return &r
}
