package fakegpu

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// fakeDriver is a tiny gpulib.Driver for comm's own tests: it records the calls it gets
// and lets a test script NCCL's answers (in-progress polls, async errors, hanging
// streams, failing calls). It moves no data; comm/commtest's simulator does that.
type Driver struct {
	Ver int

	Mu       sync.Mutex
	calls    []string
	fails    map[string]error // method name -> error to return
	nextPtr  gpulib.Ptr
	nextComm gpulib.Comm
	Ids      []gpulib.UniqueID

	InitPolls  atomic.Int32 // CommGetAsyncError answers InProgress this many more times
	AsyncErr   atomic.Int32 // gpulib.Result reported once initPolls are used up
	Hang       atomic.Bool  // StreamQuery never reports done (until CommAbort)
	SplitRank  int
	SplitWorld int
	LastErr    string // what ncclGetLastError says
}

func New() *Driver {
	return &Driver{Ver: 22907, nextPtr: 0x1000, nextComm: 100, fails: map[string]error{}}
}

func (f *Driver) Rec(name string, args ...any) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	s := name
	if len(args) > 0 {
		parts := make([]string, len(args))
		for i, a := range args {
			parts[i] = fmt.Sprint(a)
		}
		s += "(" + strings.Join(parts, ",") + ")"
	}
	f.calls = append(f.calls, s)
	return f.fails[name]
}

func (f *Driver) Fail(name string, err error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.fails[name] = err
}

// log returns the calls so far and forgets them.
func (f *Driver) Log() []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// named returns the recorded calls whose name is one of names.
func (f *Driver) Named(names ...string) []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	var out []string
	for _, c := range f.calls {
		n, _, _ := strings.Cut(c, "(")
		for _, want := range names {
			if n == want {
				out = append(out, c)
			}
		}
	}
	return out
}

func (f *Driver) alloc() gpulib.Ptr {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.nextPtr += 0x1000
	return f.nextPtr
}

func (f *Driver) SetDevice() error { return f.Rec("SetDevice") }
func (f *Driver) MemAlloc(bytes uint64) (gpulib.Ptr, error) {
	if err := f.Rec("MemAlloc", bytes); err != nil {
		return 0, err
	}
	return f.alloc(), nil
}
func (f *Driver) MemFree(p gpulib.Ptr) error { return f.Rec("MemFree") }
func (f *Driver) MemcpyDtoDAsync(dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	return f.Rec("MemcpyDtoDAsync", bytes)
}
func (f *Driver) StreamCreate() (gpulib.Stream, error) {
	return 7, f.Rec("StreamCreate")
}
func (f *Driver) StreamDestroy(s gpulib.Stream) error     { return f.Rec("StreamDestroy", s) }
func (f *Driver) StreamSynchronize(s gpulib.Stream) error { return f.Rec("StreamSynchronize", s) }
func (f *Driver) StreamQuery(s gpulib.Stream) (bool, error) {
	if err := f.Rec("StreamQuery", s); err != nil {
		return false, err
	}
	return !f.Hang.Load(), nil
}

// StreamIsCapturing is not recorded (the call sequences the tests compare predate
// it); a failure set with fail("StreamIsCapturing", err) is returned.
func (f *Driver) StreamIsCapturing(gpulib.Stream) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return false, f.fails["StreamIsCapturing"]
}

var eventSeq atomic.Uintptr

func (f *Driver) EventCreate() (gpulib.Event, error) {
	return gpulib.Event(20 + eventSeq.Add(1)%2), f.Rec("EventCreate")
}
func (f *Driver) EventDestroy(e gpulib.Event) error { return f.Rec("EventDestroy") }
func (f *Driver) EventRecord(e gpulib.Event, s gpulib.Stream) error {
	return f.Rec("EventRecord", e, s)
}
func (f *Driver) EventQuery(e gpulib.Event) (bool, error) { return true, f.Rec("EventQuery") }
func (f *Driver) StreamWaitEvent(s gpulib.Stream, e gpulib.Event) error {
	return f.Rec("StreamWaitEvent", s, e)
}
func (f *Driver) LaunchKernel(fn gpulib.Function, grid, block uint32, s gpulib.Stream, args gpulib.KernelArgs) error {
	return f.Rec("LaunchKernel", fn, grid, block, s, args.V[:args.N])
}
func (f *Driver) MultiprocessorCount() (int, error) {
	return 132, f.Rec("MultiprocessorCount")
}
func (f *Driver) Version() (int, error) { return f.Ver, f.Rec("Version") }
func (f *Driver) GetUniqueID() (gpulib.UniqueID, error) {
	return gpulib.UniqueID{1}, f.Rec("GetUniqueID")
}
func (f *Driver) CommInitRank(nranks int, id gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	if err := f.Rec("CommInitRank", nranks, rank, cfg.Blocking); err != nil {
		return 0, err
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Ids = append(f.Ids, id)
	f.nextComm++
	return f.nextComm, &gpulib.Error{Code: gpulib.InProgress}
}
func (f *Driver) LastError(gpulib.Comm) string { return f.LastErr }

func (f *Driver) CommGetAsyncError(c gpulib.Comm) (gpulib.Result, error) {
	if err := f.Rec("CommGetAsyncError"); err != nil {
		return 0, err
	}
	if f.InitPolls.Add(-1) >= 0 {
		return gpulib.InProgress, nil
	}
	f.InitPolls.Store(-1)
	return gpulib.Result(f.AsyncErr.Load()), nil
}
func (f *Driver) CommFinalize(c gpulib.Comm) error { return f.Rec("CommFinalize", c) }
func (f *Driver) CommDestroy(c gpulib.Comm) error  { return f.Rec("CommDestroy", c) }

// CommAbort ends the work in flight, as ncclCommAbort makes NCCL's kernels exit: a
// stream that Hang kept busy completes.
func (f *Driver) CommAbort(c gpulib.Comm) error {
	f.Hang.Store(false)
	return f.Rec("CommAbort", c)
}
func (f *Driver) CommSplit(c gpulib.Comm, color, key int, cfg gpulib.Config) (gpulib.Comm, error) {
	if err := f.Rec("CommSplit", color, key); err != nil {
		return 0, err
	}
	if color < 0 {
		return 0, nil
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.nextComm++
	return f.nextComm, nil
}
func (f *Driver) CommShrink(c gpulib.Comm, exclude []int, cfg gpulib.Config, flags int) (gpulib.Comm, error) {
	if err := f.Rec("CommShrink", exclude, flags); err != nil {
		return 0, err
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.nextComm++
	return f.nextComm, nil
}
func (f *Driver) CommRevoke(c gpulib.Comm, flags int) error { return f.Rec("CommRevoke") }
func (f *Driver) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("AllReduce", count, dt, op, s)
}
func (f *Driver) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Broadcast", count, dt, root, s)
}
func (f *Driver) AllGather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("AllGather", count, dt, s)
}
func (f *Driver) ReduceScatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("ReduceScatter", count, dt, op, s)
}
func (f *Driver) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Send", count, dt, peer, s)
}
func (f *Driver) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Recv", count, dt, peer, s)
}
func (f *Driver) GroupStart() error { return f.Rec("GroupStart") }
func (f *Driver) GroupEnd() error   { return f.Rec("GroupEnd") }

// Submit records "Submit(n)" and then makes the group call by call, so that the log
// shows what NCCL would see.
func (f *Driver) Submit(calls []gpulib.Call) (int, error) {
	if err := f.Rec("Submit", len(calls)); err != nil {
		return gpulib.SubmitGroupStart, err
	}
	return gpulib.SubmitEach(f, calls, nil)
}
func (f *Driver) CommRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64) (gpulib.Handle, error) {
	return 0xabc, f.Rec("CommRegister", bytes)
}
func (f *Driver) CommDeregister(c gpulib.Comm, h gpulib.Handle) error {
	return f.Rec("CommDeregister", h)
}
func (f *Driver) MemAllocNCCL(bytes uint64) (gpulib.Ptr, error) {
	if err := f.Rec("MemAllocNCCL", bytes); err != nil {
		return 0, err
	}
	return f.alloc(), nil
}
func (f *Driver) MemFreeNCCL(p gpulib.Ptr) error { return f.Rec("MemFreeNCCL") }
func (f *Driver) CommWindowRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64, flags int) (gpulib.Handle, error) {
	return 0xdef, f.Rec("CommWindowRegister", bytes, flags)
}
func (f *Driver) CommWindowDeregister(c gpulib.Comm, w gpulib.Handle) error {
	return f.Rec("CommWindowDeregister", w)
}

// CommInfo.
func (f *Driver) CommCount(c gpulib.Comm) (int, error) { return f.SplitWorld, f.Rec("CommCount") }
func (f *Driver) CommUserRank(c gpulib.Comm) (int, error) {
	return f.SplitRank, f.Rec("CommUserRank")
}

// nccl operation names: calls that must never happen on bad input.
var NcclCalls = []string{"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv",
	"GroupStart", "GroupEnd", "Submit", "CommRegister", "CommDeregister", "MemAllocNCCL", "MemFreeNCCL",
	"CommWindowRegister", "CommWindowDeregister", "CommSplit", "CommAbort", "CommFinalize",
	"CommDestroy", "EventRecord", "StreamWaitEvent", "LaunchKernel", "CommInitRank"}

func (f *Driver) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Reduce", count, dt, op, root, s)
}

func (f *Driver) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("AlltoAll", count, dt, s)
}

func (f *Driver) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Gather", count, dt, root, s)
}

func (f *Driver) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.Rec("Scatter", count, dt, root, s)
}

func (f *Driver) RedOpCreatePreMulSum(c gpulib.Comm, dt gpulib.DataType, scalar uint64, device bool) (gpulib.RedOp, error) {
	return gpulib.RedOp(5), f.Rec("RedOpCreatePreMulSum", dt, scalar, device)
}

func (f *Driver) RedOpDestroy(c gpulib.Comm, op gpulib.RedOp) error {
	return f.Rec("RedOpDestroy", op)
}
