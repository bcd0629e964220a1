package comm

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
type fakeDriver struct {
	version int

	mu       sync.Mutex
	calls    []string
	fails    map[string]error // method name -> error to return
	nextPtr  gpulib.Ptr
	nextComm gpulib.Comm
	ids      []gpulib.UniqueID

	initPolls  atomic.Int32 // CommGetAsyncError answers InProgress this many more times
	asyncErr   atomic.Int32 // gpulib.Result reported once initPolls are used up
	hang       atomic.Bool  // StreamQuery never reports done
	splitRank  int
	splitWorld int
	lastError  string // what ncclGetLastError says
}

func newFake() *fakeDriver {
	return &fakeDriver{version: 22907, nextPtr: 0x1000, nextComm: 100, fails: map[string]error{}}
}

func (f *fakeDriver) rec(name string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
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

func (f *fakeDriver) fail(name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[name] = err
}

// log returns the calls so far and forgets them.
func (f *fakeDriver) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// named returns the recorded calls whose name is one of names.
func (f *fakeDriver) named(names ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
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

func (f *fakeDriver) alloc() gpulib.Ptr {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextPtr += 0x1000
	return f.nextPtr
}

func (f *fakeDriver) SetDevice() error { return f.rec("SetDevice") }
func (f *fakeDriver) MemAlloc(bytes uint64) (gpulib.Ptr, error) {
	if err := f.rec("MemAlloc", bytes); err != nil {
		return 0, err
	}
	return f.alloc(), nil
}
func (f *fakeDriver) MemFree(p gpulib.Ptr) error { return f.rec("MemFree") }
func (f *fakeDriver) MemcpyDtoDAsync(dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	return f.rec("MemcpyDtoDAsync", bytes)
}
func (f *fakeDriver) StreamCreate() (gpulib.Stream, error) {
	return 7, f.rec("StreamCreate")
}
func (f *fakeDriver) StreamDestroy(s gpulib.Stream) error     { return f.rec("StreamDestroy", s) }
func (f *fakeDriver) StreamSynchronize(s gpulib.Stream) error { return f.rec("StreamSynchronize", s) }
func (f *fakeDriver) StreamQuery(s gpulib.Stream) (bool, error) {
	if err := f.rec("StreamQuery", s); err != nil {
		return false, err
	}
	return !f.hang.Load(), nil
}

// StreamIsCapturing is not recorded (the call sequences the tests compare predate
// it); a failure set with fail("StreamIsCapturing", err) is returned.
func (f *fakeDriver) StreamIsCapturing(gpulib.Stream) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return false, f.fails["StreamIsCapturing"]
}

var eventSeq atomic.Uintptr

func (f *fakeDriver) EventCreate() (gpulib.Event, error) {
	return gpulib.Event(20 + eventSeq.Add(1)%2), f.rec("EventCreate")
}
func (f *fakeDriver) EventDestroy(e gpulib.Event) error { return f.rec("EventDestroy") }
func (f *fakeDriver) EventRecord(e gpulib.Event, s gpulib.Stream) error {
	return f.rec("EventRecord", e, s)
}
func (f *fakeDriver) EventQuery(e gpulib.Event) (bool, error) { return true, f.rec("EventQuery") }
func (f *fakeDriver) StreamWaitEvent(s gpulib.Stream, e gpulib.Event) error {
	return f.rec("StreamWaitEvent", s, e)
}
func (f *fakeDriver) LaunchKernel(fn gpulib.Function, grid, block uint32, s gpulib.Stream, args gpulib.KernelArgs) error {
	return f.rec("LaunchKernel", fn, grid, block, s, args.V[:args.N])
}
func (f *fakeDriver) MultiprocessorCount() (int, error) {
	return 132, f.rec("MultiprocessorCount")
}
func (f *fakeDriver) Version() (int, error) { return f.version, f.rec("Version") }
func (f *fakeDriver) GetUniqueID() (gpulib.UniqueID, error) {
	return gpulib.UniqueID{1}, f.rec("GetUniqueID")
}
func (f *fakeDriver) CommInitRank(nranks int, id gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	if err := f.rec("CommInitRank", nranks, rank, cfg.Blocking); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, id)
	f.nextComm++
	return f.nextComm, &gpulib.Error{Code: gpulib.InProgress}
}
func (f *fakeDriver) LastError(gpulib.Comm) string { return f.lastError }

func (f *fakeDriver) CommGetAsyncError(c gpulib.Comm) (gpulib.Result, error) {
	if err := f.rec("CommGetAsyncError"); err != nil {
		return 0, err
	}
	if f.initPolls.Add(-1) >= 0 {
		return gpulib.InProgress, nil
	}
	f.initPolls.Store(-1)
	return gpulib.Result(f.asyncErr.Load()), nil
}
func (f *fakeDriver) CommFinalize(c gpulib.Comm) error { return f.rec("CommFinalize", c) }
func (f *fakeDriver) CommDestroy(c gpulib.Comm) error  { return f.rec("CommDestroy", c) }
func (f *fakeDriver) CommAbort(c gpulib.Comm) error    { return f.rec("CommAbort", c) }
func (f *fakeDriver) CommSplit(c gpulib.Comm, color, key int, cfg gpulib.Config) (gpulib.Comm, error) {
	if err := f.rec("CommSplit", color, key); err != nil {
		return 0, err
	}
	if color < 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextComm++
	return f.nextComm, nil
}
func (f *fakeDriver) CommShrink(c gpulib.Comm, exclude []int, cfg gpulib.Config, flags int) (gpulib.Comm, error) {
	if err := f.rec("CommShrink", exclude, flags); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextComm++
	return f.nextComm, nil
}
func (f *fakeDriver) CommRevoke(c gpulib.Comm, flags int) error { return f.rec("CommRevoke") }
func (f *fakeDriver) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("AllReduce", count, dt, op, s)
}
func (f *fakeDriver) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Broadcast", count, dt, root, s)
}
func (f *fakeDriver) AllGather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("AllGather", count, dt, s)
}
func (f *fakeDriver) ReduceScatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("ReduceScatter", count, dt, op, s)
}
func (f *fakeDriver) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Send", count, dt, peer, s)
}
func (f *fakeDriver) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	return f.rec("Recv", count, dt, peer, s)
}
func (f *fakeDriver) GroupStart() error { return f.rec("GroupStart") }
func (f *fakeDriver) GroupEnd() error   { return f.rec("GroupEnd") }

// Submit records "Submit(n)" and then makes the group call by call, so that the log
// shows what NCCL would see.
func (f *fakeDriver) Submit(calls []gpulib.Call) (int, error) {
	if err := f.rec("Submit", len(calls)); err != nil {
		return gpulib.SubmitGroupStart, err
	}
	return gpulib.SubmitEach(f, calls, nil)
}
func (f *fakeDriver) CommRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64) (gpulib.Handle, error) {
	return 0xabc, f.rec("CommRegister", bytes)
}
func (f *fakeDriver) CommDeregister(c gpulib.Comm, h gpulib.Handle) error {
	return f.rec("CommDeregister", h)
}
func (f *fakeDriver) MemAllocNCCL(bytes uint64) (gpulib.Ptr, error) {
	if err := f.rec("MemAllocNCCL", bytes); err != nil {
		return 0, err
	}
	return f.alloc(), nil
}
func (f *fakeDriver) MemFreeNCCL(p gpulib.Ptr) error { return f.rec("MemFreeNCCL") }
func (f *fakeDriver) CommWindowRegister(c gpulib.Comm, buf gpulib.Ptr, bytes uint64, flags int) (gpulib.Handle, error) {
	return 0xdef, f.rec("CommWindowRegister", bytes, flags)
}
func (f *fakeDriver) CommWindowDeregister(c gpulib.Comm, w gpulib.Handle) error {
	return f.rec("CommWindowDeregister", w)
}

// CommInfo.
func (f *fakeDriver) CommCount(c gpulib.Comm) (int, error) { return f.splitWorld, f.rec("CommCount") }
func (f *fakeDriver) CommUserRank(c gpulib.Comm) (int, error) {
	return f.splitRank, f.rec("CommUserRank")
}

// nccl operation names: calls that must never happen on bad input.
var ncclCalls = []string{"AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Send", "Recv",
	"GroupStart", "GroupEnd", "Submit", "CommRegister", "CommDeregister", "MemAllocNCCL", "MemFreeNCCL",
	"CommWindowRegister", "CommWindowDeregister", "CommSplit", "CommAbort", "CommFinalize",
	"CommDestroy", "EventRecord", "StreamWaitEvent", "LaunchKernel", "CommInitRank"}
