package comm

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
type guard struct {
	rank, world int
	elem        DType
	// align is the element size minus one when elem is valid and its size a power of
	// two (every element type's is), else -1: reduce's one-test fast path uses it as a
	// mask for the multiple-of-size and alignment checks.
	align int

	// closed and depth change under mu; the hot paths read them without it.
	closed atomic.Bool
	depth  atomic.Int32
	// threads: groups are NCCL's, per OS thread for every communicator of the process
	// (nccl_group.go), not counted in depth.
	threads bool

	mu      sync.Mutex
	handles map[BufferHandle]int
	sym     map[DevicePtr]int
	ops     map[ReduceOp]DType // live PreMulSum operators (nccl_redop.go), by element type
}

func newGuard(rank, world int, elem DType) *guard {
	align := -1
	if s := elem.Size(); s > 0 && s&(s-1) == 0 {
		align = s - 1
	}
	return &guard{rank: rank, world: world, elem: elem, align: align}
}

func (g *guard) isClosed() bool { return g.closed.Load() }

func (g *guard) open(op string) error {
	if g.isClosed() {
		return &ArgError{Op: op, Arg: "rank", Value: g.rank, Err: ErrClosed}
	}
	return nil
}

// outsideGroup fails for operations that cannot run inside a group.
func (g *guard) outsideGroup(op string) error {
	if g.closed.Load() {
		return &ArgError{Op: op, Arg: "rank", Value: g.rank, Err: ErrClosed}
	}
	if g.threads {
		if groups.open.Load() == 0 { // no group open in the process: one load
			return nil
		}
		return outsideGroup(op)
	}
	if d := g.depth.Load(); d > 0 {
		return groupOpenErr(op, int(d))
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

func checkPtr(op, arg string, p DevicePtr, bytes int) error {
	if p == 0 && bytes > 0 {
		return &ArgError{Op: op, Arg: arg, Value: p, Err: ErrNullPointer,
			Reason: fmt.Sprintf("with %d bytes", bytes)}
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

func checkRank(op, arg string, r, world int) error {
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
func (g *guard) reduce(op string, ptr DevicePtr, bytes int) error {
	if g.valid(ptr, bytes) {
		return nil
	}
	return g.reduceChecks(op, ptr, bytes)
}

// valid reports, in one test, whether reduceChecks passes: not closed, a valid element
// type, bytes a non-negative multiple of its size, ptr non-null unless bytes is 0, and
// ptr aligned to the element size.
func (g *guard) valid(ptr DevicePtr, bytes int) bool {
	a := g.align
	return (a|bytes) >= 0 && (bytes|int(ptr))&a == 0 && (ptr != 0 || bytes == 0) && !g.closed.Load()
}

// reduceChecks is reduce's checks in order, each with its own error.
func (g *guard) reduceChecks(op string, ptr DevicePtr, bytes int) error {
	if err := g.open(op); err != nil {
		return err
	}
	if !g.elem.Valid() {
		return &ArgError{Op: op, Arg: "element type", Value: int32(g.elem), Err: ErrInvalidType}
	}
	if err := checkSize(op, bytes, g.elem.Size(), g.elem); err != nil {
		return err
	}
	if err := checkPtr(op, "ptr", ptr, bytes); err != nil {
		return err
	}
	return checkAlign(op, "ptr", ptr, g.elem)
}

// reduceAsync is reduce for AllReduceAsync, which cannot sit inside a group (its events
// would be recorded before the group launches the reduction). The valid case passes in
// one test, as in reduce, when no group is open: in the process for NCCL's per-thread
// groups, else on this guard.
func (g *guard) reduceAsync(ptr DevicePtr, bytes int) error {
	if g.valid(ptr, bytes) && g.ungrouped() {
		return nil
	}
	if err := g.outsideGroup(opAllReduceAsync); err != nil {
		return err
	}
	return g.reduceChecks(opAllReduceAsync, ptr, bytes)
}

// ungrouped reports, in one load, that no group is open: in the process for NCCL's
// per-thread groups, else on this guard.
func (g *guard) ungrouped() bool {
	return (g.threads && groups.open.Load() == 0) || (!g.threads && g.depth.Load() == 0)
}

// gather checks AllGather (reduce false: bytes in any number) and ReduceScatter (reduce
// true: bytes a multiple of the element size).
func (g *guard) gather(op string, send, recv DevicePtr, bytes int, reduce bool) error {
	if err := g.open(op); err != nil {
		return err
	}
	size := 1
	if reduce {
		if !g.elem.Valid() {
			return &ArgError{Op: op, Arg: "element type", Value: int32(g.elem), Err: ErrInvalidType}
		}
		size = g.elem.Size()
	}
	if err := checkSize(op, bytes, size, g.elem); err != nil {
		return err
	}
	if err := checkTotal(op, bytes, g.world); err != nil {
		return err
	}
	if err := checkPtr(op, "send", send, bytes); err != nil {
		return err
	}
	if err := checkPtr(op, "recv", recv, bytes); err != nil {
		return err
	}
	if reduce {
		if err := checkAlign(op, "send", send, g.elem); err != nil {
			return err
		}
		if err := checkAlign(op, "recv", recv, g.elem); err != nil {
			return err
		}
	}
	return g.gatherInPlaceOrApart(op, send, recv, bytes, reduce)
}

// gatherInPlaceOrApart checks the buffers of an all-gather (reduce false) or a
// reduce-scatter of bytes per rank: the per-rank buffer is at its in-place position in
// the whole one or apart from it.
func (g *guard) gatherInPlaceOrApart(op string, send, recv DevicePtr, bytes int, reduce bool) error {
	if reduce {
		return inPlaceOrApart(op, "recv", recv, bytes, "send", send, bytes*g.world, g.rank*bytes)
	}
	return inPlaceOrApart(op, "send", send, bytes, "recv", recv, bytes*g.world, g.rank*bytes)
}

func (g *guard) broadcast(ptr DevicePtr, bytes, root int) error {
	if err := g.open(opBroadcast); err != nil {
		return err
	}
	if err := checkSize(opBroadcast, bytes, 1, Uint8); err != nil {
		return err
	}
	if err := checkPtr(opBroadcast, "ptr", ptr, bytes); err != nil {
		return err
	}
	return checkRank(opBroadcast, "root", root, g.world)
}

func (g *guard) p2p(op, peerArg string, ptr DevicePtr, bytes, peer int) error {
	// p2pChecks' passing case in one test: bytes >= 0, ptr non-null unless bytes is 0,
	// 0 <= peer < world, not closed.
	if bytes >= 0 && (ptr != 0 || bytes == 0) && peer >= 0 && peer < g.world && !g.closed.Load() {
		return nil
	}
	return g.p2pChecks(op, peerArg, ptr, bytes, peer)
}

// p2pChecks is p2p's checks in order, each with its own error.
func (g *guard) p2pChecks(op, peerArg string, ptr DevicePtr, bytes, peer int) error {
	if err := g.open(op); err != nil {
		return err
	}
	if err := checkSize(op, bytes, 1, Uint8); err != nil {
		return err
	}
	if err := checkPtr(op, "ptr", ptr, bytes); err != nil {
		return err
	}
	return checkRank(op, peerArg, peer, g.world)
}

func (g *guard) recvCommand(ptr DevicePtr, root int) error {
	if err := g.outsideGroup(opRecvCommand); err != nil {
		return err
	}
	if err := checkPtr(opRecvCommand, "ptr", ptr, 4); err != nil {
		return err
	}
	if err := checkRank(opRecvCommand, "root", root, g.world); err != nil {
		return err
	}
	if root == g.rank {
		return &ArgError{Op: opRecvCommand, Arg: "root", Value: root, Err: ErrInvalidRank,
			Reason: "root is this rank; it sends with broadcast"}
	}
	return nil
}

func (g *guard) register(ptr DevicePtr, bytes int) error {
	if err := g.open(opRegister); err != nil {
		return err
	}
	if bytes <= 0 {
		return &ArgError{Op: opRegister, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "must be positive"}
	}
	return checkPtr(opRegister, "ptr", ptr, bytes)
}

// registered records a handle returned by a successful registration. Handles are
// counted: a backend may return the same handle (the default 0) more than once.
func (g *guard) registered(h BufferHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.handles == nil {
		g.handles = make(map[BufferHandle]int)
	}
	g.handles[h]++
}

// deregister checks and forgets h; undo restores it when the backend then fails.
func (g *guard) deregister(h BufferHandle) (undo func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return nil, &ArgError{Op: opDeregister, Arg: "handle", Value: h, Err: ErrClosed}
	}
	n := g.handles[h]
	if n == 0 {
		return nil, &ArgError{Op: opDeregister, Arg: "handle", Value: h, Err: ErrUnknownHandle,
			Reason: "not returned by register-buffer or already deregistered"}
	}
	if n == 1 {
		delete(g.handles, h)
	} else {
		g.handles[h] = n - 1
	}
	return func() { g.registered(h) }, nil
}

// forget drops every registration of h (its communicator ended).
func (g *guard) forget(h BufferHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.handles, h)
}

func (g *guard) symAlloc(bytes int) error {
	if err := g.outsideGroup(opSymmetricAlloc); err != nil {
		return err
	}
	if bytes <= 0 {
		return &ArgError{Op: opSymmetricAlloc, Arg: "bytes", Value: bytes, Err: ErrInvalidSize, Reason: "must be positive"}
	}
	return nil
}

func (g *guard) allocated(p DevicePtr, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sym == nil {
		g.sym = make(map[DevicePtr]int)
	}
	g.sym[p] = bytes
}

// symFree checks and forgets p, returning its size; undo restores it when the backend
// then fails.
func (g *guard) symFree(p DevicePtr) (bytes int, undo func(), err error) {
	if err := g.outsideGroup(opSymmetricFree); err != nil {
		return 0, nil, err
	}
	if p == 0 {
		return 0, nil, &ArgError{Op: opSymmetricFree, Arg: "ptr", Value: p, Err: ErrNullPointer}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	bytes, ok := g.sym[p]
	if !ok {
		return 0, nil, &ArgError{Op: opSymmetricFree, Arg: "ptr", Value: fmt.Sprintf("%#x", uint64(p)),
			Err: ErrUnknownPointer, Reason: "not returned by symmetric-alloc or already freed"}
	}
	delete(g.sym, p)
	return bytes, func() { g.allocated(p, bytes) }, nil
}

func (g *guard) kernel(k Kernel) error {
	if err := g.open(opSetAddKernel); err != nil {
		return err
	}
	if k == 0 {
		return &ArgError{Op: opSetAddKernel, Arg: "kernel", Value: k, Err: ErrNullPointer}
	}
	return nil
}

func (g *guard) groupStart() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return &ArgError{Op: opGroupStart, Arg: "rank", Value: g.rank, Err: ErrClosed}
	}
	g.depth.Add(1)
	return nil
}

// groupEnd closes one group level; outermost reports whether it was the last one.
func (g *guard) groupEnd() (outermost bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return false, &ArgError{Op: opGroupEnd, Arg: "rank", Value: g.rank, Err: ErrClosed}
	}
	if g.depth.Load() == 0 {
		return false, &ArgError{Op: opGroupEnd, Arg: "group depth", Value: 0, Err: ErrGroupNotOpen,
			Reason: "group-end without group-start"}
	}
	return g.depth.Add(-1) == 0, nil
}

func (g *guard) groupDepth() int { return int(g.depth.Load()) }

// close marks the guard closed. It fails with ErrClosed on a second call; openGroups
// reports groups left open, which Close reports with ErrGroupOpen after tearing down.
func (g *guard) close() (openGroups int, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return 0, &ArgError{Op: opClose, Arg: "rank", Value: g.rank, Err: ErrClosed, Reason: "already closed"}
	}
	g.closed.Store(true)
	return int(g.depth.Swap(0)), nil
}

func groupLeftOpen(depth int) error {
	return &ArgError{Op: opClose, Arg: "group depth", Value: depth, Err: ErrGroupOpen,
		Reason: "group-start without group-end; the group was dropped"}
}

// typed checks a Communicator operation on count elements of t and returns its size in
// bytes.
func (g *guard) typed(op string, count int, t DType) (int, error) {
	if err := g.open(op); err != nil {
		return 0, err
	}
	if !t.Valid() {
		return 0, &ArgError{Op: op, Arg: "dtype", Value: int32(t), Err: ErrInvalidType}
	}
	if count < 0 {
		return 0, &ArgError{Op: op, Arg: "count", Value: count, Err: ErrInvalidSize, Reason: "negative"}
	}
	if count > math.MaxInt/t.Size() {
		return 0, &ArgError{Op: op, Arg: "count", Value: count, Err: ErrInvalidSize,
			Reason: fmt.Sprintf("times %d bytes (%s) overflows", t.Size(), t)}
	}
	return count * t.Size(), nil
}

func checkOp(op string, r ReduceOp) error {
	if !r.Valid() {
		return &ArgError{Op: op, Arg: "op", Value: int32(r), Err: ErrInvalidOp}
	}
	return nil
}

func (g *guard) typedReduce(ptr DevicePtr, count int, t DType, r ReduceOp) (int, error) {
	bytes, err := g.typed(opAllReduce, count, t)
	if err != nil {
		return 0, err
	}
	if err := g.checkOp(opAllReduce, r, t); err != nil {
		return 0, err
	}
	if err := checkPtr(opAllReduce, "ptr", ptr, bytes); err != nil {
		return 0, err
	}
	return bytes, checkAlign(opAllReduce, "ptr", ptr, t)
}

// fastCount is the largest count typedReduceValid accepts: count times any element
// size fits an int on every platform, and MPI's int count (2^31-1).
const fastCount = math.MaxInt32 / 8

// typedReduceValid reports, in one test, that typedReduce passes, and returns the size
// in bytes: not closed, a valid element type, one of comm's own operators (a PreMulSum
// operator is not), 0 <= count <= fastCount, ptr non-null unless count is 0 and aligned
// to the element size. A false result says nothing about the input: typedReduce then
// makes the checks one by one and says which failed.
func (g *guard) typedReduceValid(ptr DevicePtr, count int, t DType, r ReduceOp) (int, bool) {
	if uint32(t) >= uint32(len(dtypeInfo)) || uint32(r) >= uint32(len(opNames)) || uint(count) > fastCount {
		return 0, false
	}
	s := dtypeInfo[t].size
	return count * s, ptr&DevicePtr(s-1) == 0 && (ptr != 0 || count == 0) && !g.closed.Load()
}

func (g *guard) typedBroadcast(ptr DevicePtr, count int, t DType, root int) (int, error) {
	bytes, err := g.typed(opBroadcast, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkPtr(opBroadcast, "ptr", ptr, bytes); err != nil {
		return 0, err
	}
	return bytes, checkRank(opBroadcast, "root", root, g.world)
}

func (g *guard) typedGather(op string, send, recv DevicePtr, count int, t DType, r ReduceOp, reduce bool) (int, error) {
	bytes, err := g.typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if reduce {
		if err := g.checkOp(op, r, t); err != nil {
			return 0, err
		}
	}
	if err := checkTotal(op, bytes, g.world); err != nil {
		return 0, err
	}
	if err := checkPtr(op, "send", send, bytes); err != nil {
		return 0, err
	}
	if err := checkPtr(op, "recv", recv, bytes); err != nil {
		return 0, err
	}
	if reduce {
		if err := checkAlign(op, "send", send, t); err != nil {
			return 0, err
		}
		if err := checkAlign(op, "recv", recv, t); err != nil {
			return 0, err
		}
	}
	return bytes, g.gatherInPlaceOrApart(op, send, recv, bytes, reduce)
}

func (g *guard) typedP2P(op, peerArg string, ptr DevicePtr, count int, t DType, peer int) (int, error) {
	bytes, err := g.typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkPtr(op, "ptr", ptr, bytes); err != nil {
		return 0, err
	}
	return bytes, checkRank(op, peerArg, peer, g.world)
}
