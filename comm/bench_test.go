//go:build cgo

package comm

import (
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// realCalls is the driver of the comparison benchmarks on a machine without a GPU: the
// calls the measured operation makes into NCCL and CUDA go to the real libraries (raw's
// generated functions, lazily resolved, through cgo), with arguments the libraries
// reject at once: a null communicator for NCCL, the null stream, event and context for
// CUDA (without a context CUDA answers CUDA_ERROR_NOT_INITIALIZED or
// CUDA_ERROR_INVALID_CONTEXT). The rejection stands in for success: the driver drops it.
// Calls a machine without a GPU cannot make meaningfully (ncclCommGetAsyncError needs a
// communicator) answer Success from stubDriver, at no cost.
type realCalls struct{ stubDriver }

var null unsafe.Pointer

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
func (realCalls) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	_ = nccl.AllReduce(ptrOf(send), ptrOf(recv), count, nccl.DataType(dt), nccl.RedOp(op), 0, 0)
	return nil
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

// BenchmarkAllReduceVsRaw compares Backend.AllReduce (4096 bytes of bf16) with the bare
// raw calls it makes, in the same run: cuStreamIsCapturing, ncclAllReduce and, for the
// wait, cuStreamQuery.
// "bare-nccl" is ncclAllReduce alone. On this no-GPU machine NCCL rejects the null
// communicator at once, so the figures show comm's bookkeeping against the cheapest
// possible library call; on a GPU the enqueue and the wait for completion dominate both.
func BenchmarkAllReduceVsRaw(b *testing.B) {
	libcache.Load(b)
	nb := newStubNCCL(b, realCalls{})
	const bytes = 4096
	comm := func() { _ = nb.AllReduce(p, bytes) }
	bare := func() {
		_ = nccl.AllReduce(ptrOf(gpulib.Ptr(p)), ptrOf(gpulib.Ptr(p)), bytes/2, nccl.DataType(gpulib.Bfloat16), nccl.RedOp(gpulib.Sum), 0, 0)
		var st cuda.StreamCaptureStatus
		_ = cuda.StreamIsCapturing(0, &st) // comm refuses a blocking operation on a capturing stream
		_ = cuda.StreamQuery(0)
	}
	bareNCCL := func() {
		_ = nccl.AllReduce(ptrOf(gpulib.Ptr(p)), ptrOf(gpulib.Ptr(p)), bytes/2, nccl.DataType(gpulib.Bfloat16), nccl.RedOp(gpulib.Sum), 0, 0)
	}
	b.Run("same-calls", func(b *testing.B) {
		ca, ba := testing.AllocsPerRun(100, comm), testing.AllocsPerRun(100, bare)
		b.ResetTimer()
		tc, tb := pairbench.Alternate(b.N, 512, pairbench.Repeat(comm), pairbench.Repeat(bare))
		report(b, tc, tb, "bare", ca, ba)
	})
	b.Run("nccl-only", func(b *testing.B) {
		ca, ba := testing.AllocsPerRun(100, comm), testing.AllocsPerRun(100, bareNCCL)
		b.ResetTimer()
		tc, tb := pairbench.Alternate(b.N, 512, pairbench.Repeat(comm), pairbench.Repeat(bareNCCL))
		report(b, tc, tb, "bare-nccl", ca, ba)
	})
}

// BenchmarkAllReduceAsyncVsRaw compares Backend.AllReduceAsync with the bare raw calls
// of the same ordering, in the same run: cuEventRecord, cuStreamWaitEvent, ncclAllReduce,
// cuEventRecord, cuStreamWaitEvent, for a compute stream other than the legacy default
// one (for that one comm also makes the device current first).
func BenchmarkAllReduceAsyncVsRaw(b *testing.B) {
	libcache.Load(b)
	nb := newStubNCCL(b, realCalls{})
	const bytes = 4096
	comm := func() { _ = nb.AllReduceAsync(p, bytes, 3) }
	bare := func() {
		_ = cuda.EventRecord(0, 0)
		_ = cuda.StreamWaitEvent(0, 0, 0)
		_ = nccl.AllReduce(ptrOf(gpulib.Ptr(p)), ptrOf(gpulib.Ptr(p)), bytes/2, nccl.DataType(gpulib.Bfloat16), nccl.RedOp(gpulib.Sum), 0, 0)
		_ = cuda.EventRecord(0, 0)
		_ = cuda.StreamWaitEvent(0, 0, 0)
	}
	ca, ba := testing.AllocsPerRun(100, comm), testing.AllocsPerRun(100, bare)
	b.ResetTimer()
	tc, tb := pairbench.Alternate(b.N, 512, pairbench.Repeat(comm), pairbench.Repeat(bare))
	report(b, tc, tb, "bare", ca, ba)
}
