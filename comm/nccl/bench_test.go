//go:build cgo

package nccl

import (
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// realCalls is the driver of the comparison benchmarks on a machine without a GPU: every
// call the measured operation makes into NCCL and CUDA on its success path goes to the
// real library (raw's generated function, lazily resolved, through cgo), with arguments
// the library rejects at once: a null communicator for NCCL, the null stream, event and
// context for CUDA (without a context CUDA answers CUDA_ERROR_NOT_INITIALIZED or
// CUDA_ERROR_INVALID_CONTEXT). The driver then answers success, as the production driver
// does when the library succeeds, so comm runs its success path; the library's answer
// is dropped (see BenchmarkAllReduceVsRaw for why that is measured against the same
// rejected calls, and cross-checked by a driver that calls nothing).
type realCalls struct{ stubDriver }

func (realCalls) SetDevice() error { _ = cuda.CtxSetCurrent(0); return nil }
func (realCalls) StreamQuery(gpulib.Stream) (bool, error) {
	_ = cuda.StreamQuery(0)
	return true, nil
}
func (realCalls) StreamIsCapturing(gpulib.Stream) (bool, error) {
	var st cuda.StreamCaptureStatus
	_ = cuda.StreamIsCapturing(0, &st)
	return false, nil
}
func (realCalls) EventRecord(gpulib.Event, gpulib.Stream) error {
	_ = cuda.EventRecord(0, 0)
	return nil
}
func (realCalls) StreamWaitEvent(gpulib.Stream, gpulib.Event) error {
	_ = cuda.StreamWaitEvent(0, 0, 0)
	return nil
}
func (realCalls) CommGetAsyncError(gpulib.Comm) (gpulib.Result, error) {
	var r nccl.Result
	_ = nccl.CommGetAsyncError(0, &r)
	return gpulib.Success, nil
}
func (realCalls) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	_ = nccl.AllReduce(ptrOf(send), ptrOf(recv), count, nccl.DataType(dt), nccl.RedOp(op), 0, 0)
	return nil
}

// lightCalls is realCalls with every library call replaced by one that succeeds at once
// without a GPU and does little else: cuDriverGetVersion for each CUDA call,
// ncclGetVersion for each NCCL call. Between such calls comm's code runs as it does
// between library calls that return promptly (see light-above-raw-ns/op in
// BenchmarkAllReduceVsRaw); lightRaw makes the same calls directly.
type lightCalls struct{ stubDriver }

func lightCUDA() error { var v int32; return cuda.DriverGetVersion(&v) }
func lightNCCL() error { var v int32; return nccl.GetVersion(&v) }

func (lightCalls) StreamQuery(gpulib.Stream) (bool, error)       { _ = lightCUDA(); return true, nil }
func (lightCalls) StreamIsCapturing(gpulib.Stream) (bool, error) { _ = lightCUDA(); return false, nil }
func (lightCalls) EventRecord(gpulib.Event, gpulib.Stream) error { _ = lightCUDA(); return nil }
func (lightCalls) StreamWaitEvent(gpulib.Stream, gpulib.Event) error {
	_ = lightCUDA()
	return nil
}
func (lightCalls) CommGetAsyncError(gpulib.Comm) (gpulib.Result, error) {
	_ = lightNCCL()
	return gpulib.Success, nil
}
func (lightCalls) AllReduce(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	_ = lightNCCL()
	return nil
}

// lightRaw returns the raw side of lightCalls for the calls of an operation (true for
// an NCCL call, false for a CUDA call, in order), after checking that both succeed.
func lightRaw(b *testing.B, ncclCalls ...bool) func() {
	b.Helper()
	if err := lightCUDA(); err != nil {
		b.Fatalf("cuDriverGetVersion: %v", err)
	}
	if err := lightNCCL(); err != nil {
		b.Fatalf("ncclGetVersion: %v", err)
	}
	return func() {
		for _, n := range ncclCalls {
			if n {
				_ = lightNCCL()
			} else {
				_ = lightCUDA()
			}
		}
	}
}

func ptrOf(p gpulib.Ptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

func report(b *testing.B, call, base time.Duration, baseName string, callAllocs, baseAllocs float64) {
	n := float64(b.N)
	b.ReportMetric(float64(call.Nanoseconds())/n, "comm-ns/op")
	b.ReportMetric(float64(base.Nanoseconds())/n, baseName+"-ns/op")
	b.ReportMetric(float64(call)/float64(base), "comm/"+baseName)
	b.ReportMetric(callAllocs, "comm-allocs/op")
	b.ReportMetric(baseAllocs, baseName+"-allocs/op")
}

// comparison is what compareWithRaw runs: the operation through comm over realCalls
// (call), the same raw calls made directly (raw), the operation over stubDriver (own),
// and, when not nil, floorComm over realCalls (floor), its driver calls alone over
// realCalls (calls), and the operation over lightCalls with the same light calls made
// directly (light, lightRaw).
type comparison struct {
	call, own, floor, calls, light func() error
	raw, lightRaw                  func()
}

// compareWithRaw runs the sides of cmp in blocks of 256 calls that rotate which goes
// first. It checks first that each comm side succeeds (comm's success path is what is
// measured, not an early return) and reports, as medians over the blocks: comm-ns/op,
// raw-ns/op, the difference above-raw-ns/op (comm's own cost in the same run), the ratio
// comm/raw, own-ns/op, floor-above-raw-ns/op and calls-above-raw-ns/op (the floor's and
// the bare driver calls' difference to raw), light-above-raw-ns/op (the light sides'
// difference), and the allocations of call, raw and own.
func compareWithRaw(b *testing.B, cmp comparison) {
	b.Helper()
	for what, f := range map[string]func() error{"the measured call": cmp.call, "the call over a driver that calls nothing": cmp.own,
		"the floor": cmp.floor, "the floor's calls": cmp.calls, "the call over light calls": cmp.light} {
		if f == nil {
			continue
		}
		if err := f(); err != nil {
			b.Fatalf("%s failed: %v", what, err)
		}
	}
	do := func(f func() error) func() { return func() { _ = f() } }
	ca, ra, oa := testing.AllocsPerRun(100, do(cmp.call)), testing.AllocsPerRun(100, cmp.raw), testing.AllocsPerRun(100, do(cmp.own))
	fns := []func(int){pairbench.Repeat(do(cmp.call)), pairbench.Repeat(cmp.raw), pairbench.Repeat(do(cmp.own))}
	at := map[string]int{} // where the optional sides are in fns
	for _, side := range []struct {
		name string
		f    func()
	}{{"floor", opt(cmp.floor)}, {"calls", opt(cmp.calls)}, {"light", opt(cmp.light)}, {"light-raw", cmp.lightRaw}} {
		if side.f != nil {
			at[side.name] = len(fns)
			fns = append(fns, pairbench.Repeat(side.f))
		}
	}
	b.ResetTimer()
	per := pairbench.Blocks(b.N, 256, fns...)
	b.StopTimer()
	diff := func(i, base int) []float64 {
		d := make([]float64, len(per[i]))
		for j := range d {
			d[j] = per[i][j] - per[base][j]
		}
		return d
	}
	ratio := make([]float64, 0, len(per[0]))
	for j := range per[0] {
		if per[1][j] > 0 {
			ratio = append(ratio, per[0][j]/per[1][j])
		}
	}
	if i, ok := at["floor"]; ok {
		b.ReportMetric(pairbench.Median(diff(i, 1)), "floor-above-raw-ns/op")
	}
	if i, ok := at["calls"]; ok {
		b.ReportMetric(pairbench.Median(diff(i, 1)), "calls-above-raw-ns/op")
	}
	if i, ok := at["light"]; ok {
		b.ReportMetric(pairbench.Median(diff(i, at["light-raw"])), "light-above-raw-ns/op")
	}
	b.ReportMetric(pairbench.Median(per[0]), "comm-ns/op")
	b.ReportMetric(pairbench.Median(per[1]), "raw-ns/op")
	b.ReportMetric(pairbench.Median(diff(0, 1)), "above-raw-ns/op")
	b.ReportMetric(pairbench.Median(ratio), "comm/raw")
	b.ReportMetric(pairbench.Median(per[2]), "own-ns/op")
	b.ReportMetric(ca, "comm-allocs/op")
	b.ReportMetric(ra, "raw-allocs/op")
	b.ReportMetric(oa, "own-allocs/op")
}

// opt is f as a side of compareWithRaw, nil for none.
func opt(f func() error) func() {
	if f == nil {
		return nil
	}
	return func() { _ = f() }
}

// BenchmarkAllReduceVsRaw measures comm's own cost on the success path of
// Backend.AllReduce (4096 bytes of bf16): what it adds to the raw calls it makes, in the
// same run. Those calls are cuStreamIsCapturing (a blocking operation refuses a
// capturing stream), ncclAllReduce, and for the wait cuStreamQuery and
// ncclCommGetAsyncError.
//
// How the success path is isolated without a GPU: no call of a real NCCL or CUDA
// succeeds without a device and a communicator, and the rejection would make comm take
// its error path (an *OpError wrapping raw's error, which carries ncclGetLastError's
// text), which is not the path to measure. So the comm side runs over realCalls, which
// makes each real call and answers success, as the production driver does when the
// library succeeds: comm runs its whole success path (argument checks, the lifecycle
// and driver locks, the health, group and capture state, the wait). The raw side makes
// the same calls directly, rejected the same way (raw builds its *nccl.Error with
// ncclGetLastError's text for each NCCL call, on both sides, so each side pays the same
// for the library). Their difference, above-raw-ns/op, is comm's own work plus the
// driver interface it calls through, with comm's code run between the library's, as in
// use. comm/raw is relative to these rejected calls, whose error path costs far more
// than comm does, so the absolute difference is the figure to judge.
//
// More sides, in the same rotation, check that figure without dropping any library
// answer or reading comm's code:
//   - own-ns/op is the call over stubDriver, which calls nothing: comm's work alone,
//     its code hot.
//   - floor-above-raw-ns/op is floorComm over realCalls: the locks and driver calls the
//     path needs and nothing else; calls-above-raw-ns/op is the same four driver calls
//     without the locks. After a rejected NCCL call (about 1 µs of the library's error
//     path) the processor has lost its predictions for the Go code around it: every
//     call level between the benchmark and the library (the driver interface's method
//     is one) then costs a few nanoseconds, and the two locks close to nothing, so
//     calls-above-raw is most of floor-above-raw, and above-raw exceeds own-ns.
//   - light-above-raw-ns/op is the call over lightCalls minus the same light library
//     calls made directly (cuDriverGetVersion for each CUDA call, ncclGetVersion for
//     each NCCL call, all succeeding at once): comm's own cost between real library
//     calls that return promptly, the raw baseline again in the same run.
func BenchmarkAllReduceVsRaw(b *testing.B) {
	libcache.Load(b)
	nb := newStubNCCL(b, realCalls{})
	ob := newStubNCCL(b, stubDriver{})
	lb := newStubNCCL(b, lightCalls{})
	const bytes = 4096
	raw := func() {
		var st cuda.StreamCaptureStatus
		_ = cuda.StreamIsCapturing(0, &st)
		_ = nccl.AllReduce(ptrOf(gpulib.Ptr(p)), ptrOf(gpulib.Ptr(p)), bytes/2, nccl.DataType(gpulib.Bfloat16), nccl.RedOp(gpulib.Sum), 0, 0)
		_ = cuda.StreamQuery(0)
		var r nccl.Result
		_ = nccl.CommGetAsyncError(0, &r)
	}
	f := &floorComm{d: realCalls{}}
	compareWithRaw(b, comparison{
		call:     func() error { return nb.AllReduce(p, bytes) },
		own:      func() error { return ob.AllReduce(p, bytes) },
		floor:    func() error { return f.allReduce(gpulib.Ptr(p), bytes/2) },
		calls:    func() error { return f.calls(gpulib.Ptr(p), bytes/2) },
		light:    func() error { return lb.AllReduce(p, bytes) },
		raw:      raw,
		lightRaw: lightRaw(b, false, true, false, true),
	})
}

// BenchmarkAllReduceAsyncVsRaw is BenchmarkAllReduceVsRaw for Backend.AllReduceAsync on
// a compute stream other than the legacy default one (for that one comm also makes the
// device current first): the raw calls are cuEventRecord, cuStreamWaitEvent,
// ncclAllReduce, cuEventRecord, cuStreamWaitEvent. It has no floor sides.
func BenchmarkAllReduceAsyncVsRaw(b *testing.B) {
	libcache.Load(b)
	nb := newStubNCCL(b, realCalls{})
	ob := newStubNCCL(b, stubDriver{})
	lb := newStubNCCL(b, lightCalls{})
	const bytes = 4096
	raw := func() {
		_ = cuda.EventRecord(0, 0)
		_ = cuda.StreamWaitEvent(0, 0, 0)
		_ = nccl.AllReduce(ptrOf(gpulib.Ptr(p)), ptrOf(gpulib.Ptr(p)), bytes/2, nccl.DataType(gpulib.Bfloat16), nccl.RedOp(gpulib.Sum), 0, 0)
		_ = cuda.EventRecord(0, 0)
		_ = cuda.StreamWaitEvent(0, 0, 0)
	}
	compareWithRaw(b, comparison{
		call:     func() error { return nb.AllReduceAsync(p, bytes, 3) },
		own:      func() error { return ob.AllReduceAsync(p, bytes, 3) },
		light:    func() error { return lb.AllReduceAsync(p, bytes, 3) },
		raw:      raw,
		lightRaw: lightRaw(b, false, false, true, false, false),
	})
}

// floorComm holds what the success path of Backend.AllReduce cannot drop without
// changing what it guarantees: the lifecycle lock held shared across the operation
// (Close waits for it), the driver lock around the enqueue (no two NCCL calls on the
// communicator at once; the wait does not hold it), and the four driver calls
// (cuStreamIsCapturing, ncclAllReduce, cuStreamQuery, ncclCommGetAsyncError) through the
// gpulib.Driver interface. A lock-free state word could merge the two locks, but they
// cost close to nothing here (floor-above-raw against calls-above-raw in
// BenchmarkAllReduceVsRaw): the calls are the floor.
type floorComm struct {
	life   sync.RWMutex
	mu     sync.Mutex
	d      gpulib.Driver
	stream gpulib.Stream
	comm   gpulib.Comm
}

//go:noinline
func (f *floorComm) allReduce(p gpulib.Ptr, count uint64) error {
	f.life.RLock()
	defer f.life.RUnlock()
	if capturing, err := f.d.StreamIsCapturing(f.stream); err != nil || capturing {
		return errors.New("capturing")
	}
	f.mu.Lock()
	err := f.d.AllReduce(p, p, count, gpulib.Bfloat16, gpulib.Sum, f.comm, f.stream)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	if done, err := f.d.StreamQuery(f.stream); err != nil || !done {
		return errors.New("not done")
	}
	if res, err := f.d.CommGetAsyncError(f.comm); err != nil || res != gpulib.Success {
		return errors.New("async error")
	}
	return nil
}

// calls is allReduce without the locks: the four driver calls alone.
//
//go:noinline
func (f *floorComm) calls(p gpulib.Ptr, count uint64) error {
	if capturing, err := f.d.StreamIsCapturing(f.stream); err != nil || capturing {
		return errors.New("capturing")
	}
	if err := f.d.AllReduce(p, p, count, gpulib.Bfloat16, gpulib.Sum, f.comm, f.stream); err != nil {
		return err
	}
	if done, err := f.d.StreamQuery(f.stream); err != nil || !done {
		return errors.New("not done")
	}
	if res, err := f.d.CommGetAsyncError(f.comm); err != nil || res != gpulib.Success {
		return errors.New("async error")
	}
	return nil
}

// BenchmarkOverheadFloor compares comm's own cost on the success path of
// Backend.AllReduce (over stubDriver, which calls nothing) with floorComm, the locks and
// driver calls that path needs and nothing else, in rotating blocks of the same run:
// own-above-floor-ns/op is what comm's checks and state (arguments, closed, health,
// group scope, two-rank path, watchdog, result handling) add to that floor.
func BenchmarkOverheadFloor(b *testing.B) {
	nb := newStubNCCL(b, stubDriver{})
	f := &floorComm{d: stubDriver{}, stream: 7, comm: 1}
	own := func() { _ = nb.AllReduce(p, 4096) }
	floor := func() { _ = f.allReduce(gpulib.Ptr(p), 2048) }
	b.ResetTimer()
	per := pairbench.Blocks(b.N, 256, pairbench.Repeat(own), pairbench.Repeat(floor))
	b.StopTimer()
	above := make([]float64, len(per[0]))
	for j := range above {
		above[j] = per[0][j] - per[1][j]
	}
	b.ReportMetric(pairbench.Median(per[0]), "own-ns/op")
	b.ReportMetric(pairbench.Median(per[1]), "floor-ns/op")
	b.ReportMetric(pairbench.Median(above), "own-above-floor-ns/op")
}
