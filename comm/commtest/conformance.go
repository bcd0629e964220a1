package commtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Instance is one running world of a Harness: its ranks' backends and the device memory
// they work on. *Cluster is one. Optional capabilities are found by type assertion:
// CommunicatorSource (typed cases), CallCounter (proof that bad input never reaches the
// library) and StreamHolder (ordering made observable).
type Instance interface {
	// Backends returns the ranks' backends, index = rank.
	Backends() []comm.Backend
	Alloc(rank, bytes int) (comm.DevicePtr, error)
	Free(rank int, p comm.DevicePtr) error
	// Write and Read copy between the host and rank's device memory, synchronously.
	Write(rank int, p comm.DevicePtr, data []byte) error
	Read(rank int, p comm.DevicePtr, n int) ([]byte, error)
	NewStream(rank int) (comm.Stream, error)
	DestroyStream(rank int, s comm.Stream) error
	// CopyAsync queues a device-to-device copy on s (the suite's stand-in for compute work).
	CopyAsync(rank int, dst, src comm.DevicePtr, bytes int, s comm.Stream) error
	SyncStream(rank int, s comm.Stream) error
	// Close closes every backend and releases the world.
	Close() error
}

// CommunicatorSource is an Instance that also offers the ranks' typed Communicators.
type CommunicatorSource interface {
	Communicators() []comm.Communicator
}

// CallCounter is an Instance that counts the library calls its backends make.
type CallCounter interface {
	DriverCalls() int64
}

// BackendSplitter is an Instance whose backends can make backends of sub-groups
// (nccl.Backend.Split): SplitBackends calls it on every rank at once, rank r joining the
// sub-group color(r) ordered by rank, and returns the new backends (nil for a negative
// color), index = rank. The caller closes them.
type BackendSplitter interface {
	SplitBackends(ctx context.Context, color func(rank int) int) ([]comm.Backend, error)
}

// AsyncErrorInjector is an Instance that can make rank's library report an
// asynchronous error (ncclCommGetAsyncError), as after a transport failure.
type AsyncErrorInjector interface {
	InjectAsyncError(rank int, code nccl.Result) error
}

// StreamHolder is an Instance that can block a stream until released.
type StreamHolder interface {
	HoldStream(rank int, s comm.Stream) (release func(), err error)
}

// Harness describes a backend implementation for RunConformance.
type Harness struct {
	// Name labels the run.
	Name string
	// World is the number of ranks.
	World int
	// NoOp marks a backend that moves no data, like comm.Single: a one-rank world
	// whose operations validate and do nothing. Its in-place results are still checked
	// (on one rank every in-place collective leaves the buffer as it is), but results
	// that need data to move (out-of-place gathers and reduce-scatters, send/receive
	// into another buffer) are not.
	NoOp bool
	// Start starts World ranks whose backends reduce elements of type elem. The suite
	// closes the Instance.
	Start func(elem comm.DType) (Instance, error)
	// Timeout bounds every step that waits for all ranks (default one minute); a step
	// that takes longer fails the test instead of hanging it.
	Timeout time.Duration
	// StartWatched, when set, starts World ranks like Start but with the backend's
	// health watchdog on (nccl.WithWatchdog, comm.WithAbortOnFailure) and the operation
	// timeout timeout, for the idle-worker case.
	StartWatched func(elem comm.DType, timeout time.Duration) (Instance, error)
	// Requires lists the optional capabilities the backend must have. A case whose
	// operation every rank answers with ErrUnsupported is skipped for a capability not
	// listed here, and fails for one that is: a wrong version check cannot pass as a
	// missing feature.
	Requires []Capability
}

// Capability is an optional feature of a backend that RunConformance exercises.
type Capability string

// The capabilities RunConformance knows.
const (
	// CapRegister: RegisterBuffer and DeregisterBuffer (ncclCommRegister, NCCL >= 2.19).
	CapRegister Capability = "register-buffer"
	// CapSymmetricMemory: SymmetricAlloc and SymmetricFree (ncclMemAlloc, NCCL >= 2.19).
	CapSymmetricMemory Capability = "symmetric-memory"
	// CapSplit: Communicator.Split and, on an Instance that is a BackendSplitter,
	// backends of sub-groups (ncclCommSplit, NCCL >= 2.18).
	CapSplit Capability = "split"
	// CapWatchdog: a health watchdog (Harness.StartWatched).
	CapWatchdog Capability = "watchdog"
	// CapAsyncErrors: asynchronous library errors the suite can cause (an Instance
	// that is an AsyncErrorInjector).
	CapAsyncErrors Capability = "async-errors"
	// CapPreMulSum: NCCL's pre-multiplied sum operators (PreMulSum, PreMulSumDevice and
	// DestroyReduceOp on the typed communicators, ncclRedOpCreatePreMulSum).
	CapPreMulSum Capability = "pre-mul-sum"
	// CapGroupScope: a group opened on one communicator covers the operations the same
	// goroutine issues on others, which it defers to the outermost GroupEnd (NCCL's
	// per-thread group state). Communicators whose operations complete when they
	// return, so that groups defer nothing, lack it.
	CapGroupScope Capability = "group-scope"
	// CapDeviceAPI: NCCL's device API on *nccl.Backend (conformance_devapi.go):
	// Communicator.Properties, the teams and device communicators (NCCL >= 2.29.7).
	CapDeviceAPI Capability = "device-api"
)

// lacking ends a case whose capability c the harness does not offer (has false): it
// fails when the harness requires c, and skips otherwise.
func (h Harness) lacking(t *testing.T, c Capability, has bool, why string) {
	t.Helper()
	if has {
		return
	}
	if h.requires(c) {
		t.Fatalf("the harness requires %s, but %s", c, why)
	}
	t.Skipf("%s: not offered (%s) and not required by the harness", c, why)
}

// backendsAs returns every rank's backend as a T (indexed by rank), or ends the case
// as lacking c (why says what is missing) when one is not.
func backendsAs[T any](t *testing.T, e *env, c Capability, why string) []T {
	t.Helper()
	bs := make([]T, e.n)
	for _, r := range e.ranks() {
		b, ok := e.b[r].(T)
		e.h.lacking(t, c, ok, why)
		bs[r] = b
	}
	return bs
}

func (h Harness) requires(c Capability) bool {
	for _, r := range h.Requires {
		if r == c {
			return true
		}
	}
	return false
}

// RunConformance runs the conformance suite against h: every Backend operation with
// every element type it applies to (reductions: all twelve; byte movers: once), in place
// and out of place, every root, a grouped send/receive ring, barrier, AllReduceAsync
// ordering against a compute stream, RecvCommandU32 from every root, buffer
// registration, symmetric allocation; the typed Communicator (every type and reduce op)
// when the Instance offers one; and a bad-input table where every method fails with
// comm's sentinel errors without a library call. Results are compared element by
// element with a host reference; the inputs are chosen so that every partial result is
// exact, which makes the reference independent of the order in which a real NCCL
// reduces.
func RunConformance(t *testing.T, h Harness) {
	t.Helper()
	if h.World < 1 || h.Start == nil {
		t.Fatalf("conformance %q: harness needs World >= 1 and Start (world %d)", h.Name, h.World)
	}
	if h.Timeout <= 0 {
		h.Timeout = time.Minute
	}
	for _, elem := range allTypes {
		t.Run("reduce/"+elem.String(), func(t *testing.T) {
			e := start(t, h, elem)
			t.Run("all-reduce", e.allReduce)
			t.Run("reduce-scatter", e.reduceScatter)
			t.Run("all-reduce-async-ordering", e.allReduceAsync)
		})
	}
	t.Run("move", func(t *testing.T) {
		e := start(t, h, comm.BFloat16)
		t.Run("all-gather", e.allGather)
		t.Run("broadcast", e.broadcast)
		t.Run("send-recv-ring", e.ring)
		t.Run("nested-groups", e.nestedGroups)
		t.Run("suspend", e.suspend)
		t.Run("group-scope-across-backends", e.backendGroupScope)
		t.Run("barrier", e.barrier)
		t.Run("recv-command-u32", e.recvCommand)
		t.Run("register", e.register)
		t.Run("symmetric-memory", e.symmetric)
		t.Run("device-api", e.deviceAPI)
		t.Run("one-sided", e.oneSided)
		t.Run("grow", e.grow)
	})
	t.Run("typed", func(t *testing.T) {
		e := start(t, h, comm.BFloat16)
		src, ok := e.inst.(CommunicatorSource)
		if !ok {
			t.Skip("the instance offers no typed communicators")
		}
		e.typed(t, src.Communicators())
	})
	t.Run("bad-input", func(t *testing.T) {
		e := start(t, h, comm.BFloat16)
		e.badInput(t)
	})
	t.Run("commands-under-cancellation", func(t *testing.T) {
		e := start(t, h, comm.BFloat16)
		e.commandsUnderCancellation(t)
	})
	t.Run("idle-worker-under-watchdog", func(t *testing.T) { idleWorker(t, h) })
	t.Run("typed-async-errors", func(t *testing.T) {
		e := start(t, h, comm.BFloat16)
		e.typedAsyncErrors(t)
	})
}

// env is one started instance.
type env struct {
	h    Harness
	inst Instance
	b    []comm.Backend
	n    int
	elem comm.DType
	es   int

	mem   Memory // inst, or a CommInstance's memory (distributed.go)
	local []int  // the ranks this process runs; nil: all of them
	count any    // what may be a CallCounter
	// lacks, when set (RunCommunicatorConformance), reports the capabilities the
	// harness states it lacks: a missing capability it does not list fails.
	lacks func(Capability) bool
}

// ranks lists the ranks this process runs and checks: all of them, unless the world
// spans several processes (RunCommunicatorConformance with Local).
func (e *env) ranks() []int {
	if e.local != nil {
		return e.local
	}
	all := make([]int, e.n)
	for r := range all {
		all[r] = r
	}
	return all
}

func start(t *testing.T, h Harness, elem comm.DType) *env {
	t.Helper()
	inst, err := h.Start(elem)
	require.NoError(t, err, "start %s with element type %v", h.Name, elem)
	closed := false
	t.Cleanup(func() {
		if !closed {
			if err := inst.Close(); err != nil {
				t.Errorf("close %s: %v", h.Name, err)
			}
		}
	})
	b := inst.Backends()
	require.Len(t, b, h.World)
	for r, be := range b {
		require.Equal(t, r, be.Rank(), "backend %d's rank", r)
		require.Equal(t, h.World, be.WorldSize())
	}
	return &env{h: h, inst: inst, b: b, n: h.World, elem: elem, es: elem.Size(), mem: inst, count: inst}
}

// all runs f on every rank concurrently and requires success within the timeout.
func (e *env) all(t *testing.T, f func(rank int) error) {
	t.Helper()
	errs := e.try(t, f)
	for _, r := range e.ranks() {
		require.NoError(t, errs[r], "rank %d", r)
	}
}

func (e *env) try(t *testing.T, f func(rank int) error) []error {
	t.Helper()
	errs := make([]error, e.n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for _, r := range e.ranks() {
			wg.Go(func() { errs[r] = f(r) })
		}
		wg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(e.h.Timeout):
		t.Fatalf("ranks did not finish within %v (deadlock?)", e.h.Timeout)
	}
	return errs
}

// buffers allocates bytes on every rank (at least one byte), filled by fill if not nil.
func (e *env) buffers(t *testing.T, bytes int, fill func(rank int) []byte) []comm.DevicePtr {
	t.Helper()
	ps := make([]comm.DevicePtr, e.n)
	for _, r := range e.ranks() {
		p, err := e.mem.Alloc(r, max(bytes, 1))
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.mem.Free(r, p) })
		if fill != nil {
			require.NoError(t, e.mem.Write(r, p, fill(r)))
		}
		ps[r] = p
	}
	return ps
}

func (e *env) read(t *testing.T, rank int, p comm.DevicePtr, n int) []byte {
	t.Helper()
	if n == 0 {
		return []byte{}
	}
	b, err := e.mem.Read(rank, p, n)
	require.NoError(t, err)
	return b
}

// checkBytes compares got with want element by element and reports the first
// differences with their values.
func checkBytes(t *testing.T, elem comm.DType, want, got []byte, format string, args ...any) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	es := max(elem.Size(), 1)
	msg := fmt.Sprintf(format, args...)
	if len(want) != len(got) {
		t.Fatalf("%s: %d bytes, want %d", msg, len(got), len(want))
	}
	bad := 0
	for i := 0; i+es <= len(want); i += es {
		if !bytes.Equal(want[i:i+es], got[i:i+es]) {
			if bad < 5 {
				t.Errorf("%s: element %d = %v (% x), want %v (% x)", msg, i/es, value(got[i:], elem), got[i:i+es], value(want[i:], elem), want[i:i+es])
			}
			bad++
		}
	}
	t.Fatalf("%s: %d of %d elements differ", msg, bad, len(want)/es)
}

// pattern is rank's input element i for a reduction op on n ranks. Every partial result
// of any order of reduction is exact in every type: sums of {-1,0,1}, products of
// {1,-1,2} (at most 2^8), max/min of [-4,4], averages of {-n,0,n}.
func pattern(op comm.ReduceOp, t comm.DType, n, rank, i int) float64 {
	k := rank*7 + i*3 + i/5
	switch op {
	case comm.Prod:
		if unsigned(t) {
			return []float64{1, 2}[k%2]
		}
		return []float64{1, -1, 2}[k%3]
	case comm.Max, comm.Min:
		if unsigned(t) {
			return float64(k % 9)
		}
		return float64(k%9 - 4)
	case comm.Avg:
		if unsigned(t) {
			return []float64{0, float64(n)}[k%2]
		}
		return []float64{float64(-n), 0, float64(n)}[k%3]
	}
	if unsigned(t) {
		return float64(k % 2)
	}
	return float64(k%3 - 1)
}

// reference is the exact reduction of element i over n ranks.
func reference(op comm.ReduceOp, t comm.DType, n, i int) float64 {
	acc := pattern(op, t, n, 0, i)
	for r := 1; r < n; r++ {
		v := pattern(op, t, n, r, i)
		switch op {
		case comm.Prod:
			acc *= v
		case comm.Max:
			acc = math.Max(acc, v)
		case comm.Min:
			acc = math.Min(acc, v)
		default:
			acc += v
		}
	}
	if op == comm.Avg {
		acc /= float64(n) // exact: the sum is a multiple of n
	}
	return acc
}

// inputs encodes rank's pattern for elements [from, from+count).
func inputs(op comm.ReduceOp, t comm.DType, n, rank, from, count int) []byte {
	v := make([]float64, count)
	for i := range v {
		v[i] = pattern(op, t, n, rank, from+i)
	}
	b, _ := EncodeValues(t, v)
	return b
}

func expected(op comm.ReduceOp, t comm.DType, n, from, count int) []byte {
	v := make([]float64, count)
	for i := range v {
		v[i] = reference(op, t, n, from+i)
	}
	b, _ := EncodeValues(t, v)
	return b
}

var counts = []int{0, 1, 7, 33, 1031}

func (e *env) allReduce(t *testing.T) {
	for _, count := range counts {
		bytes := count * e.es
		var ps []comm.DevicePtr
		if count > 0 {
			ps = e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
		} else {
			ps = make([]comm.DevicePtr, e.n) // zero bytes: a null pointer is allowed
		}
		e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], bytes) })
		want := expected(comm.Sum, e.elem, e.n, 0, count)
		for r := range e.n {
			checkBytes(t, e.elem, want, e.read(t, r, ps[r], bytes), "all-reduce of %d elements, rank %d", count, r)
		}
	}
}

func (e *env) reduceScatter(t *testing.T) {
	for _, count := range []int{0, 1, 9, 130} {
		share := count * e.es
		total := share * e.n
		for _, inPlace := range []bool{false, true} {
			send := e.buffers(t, total, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count*e.n) })
			recv := make([]comm.DevicePtr, e.n)
			if inPlace {
				for r := range e.n {
					recv[r] = send[r] + comm.DevicePtr(r*share)
				}
			} else {
				recv = e.buffers(t, share, nil)
			}
			e.all(t, func(r int) error { return e.b[r].ReduceScatter(send[r], recv[r], share) })
			if e.h.NoOp && !inPlace {
				continue
			}
			for r := range e.n {
				want := expected(comm.Sum, e.elem, e.n, r*count, count)
				checkBytes(t, e.elem, want, e.read(t, r, recv[r], share), "reduce-scatter of %d elements per rank (in place %v), rank %d", count, inPlace, r)
			}
		}
	}
}

// allReduceAsync checks the ordering against a compute stream: a copy queued on the
// compute stream before AllReduceAsync provides its input, a copy queued after it sees
// its result, and the host does not wait.
func (e *env) allReduceAsync(t *testing.T) {
	const count = 257
	bytes := count * e.es
	src := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
	garbage := func(int) []byte { return bytesOf(0x5a, bytes) }
	buf := e.buffers(t, bytes, garbage)
	out := e.buffers(t, bytes, garbage)
	streams := make([]comm.Stream, e.n)
	for r := range e.n {
		s, err := e.inst.NewStream(r)
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.inst.DestroyStream(r, s) })
		streams[r] = s
	}
	holder, canHold := e.inst.(StreamHolder)
	releases := make([]func(), e.n)
	if canHold {
		for r := range e.n {
			release, err := holder.HoldStream(r, streams[r])
			require.NoError(t, err)
			t.Cleanup(release)
			releases[r] = release
		}
	}
	e.all(t, func(r int) error {
		s := streams[r]
		if err := e.inst.CopyAsync(r, buf[r], src[r], bytes, s); err != nil {
			return err
		}
		if err := e.b[r].AllReduceAsync(buf[r], bytes, s); err != nil {
			return err
		}
		return e.inst.CopyAsync(r, out[r], buf[r], bytes, s)
	})
	if canHold {
		for r := range e.n {
			require.Equal(t, garbage(r), e.read(t, r, out[r], bytes), "rank %d: work behind a held compute stream ran", r)
			require.Equal(t, garbage(r), e.read(t, r, buf[r], bytes), "rank %d: the all-reduce ran before the compute work queued ahead of it", r)
			releases[r]()
		}
	}
	e.all(t, func(r int) error { return e.inst.SyncStream(r, streams[r]) })
	want := expected(comm.Sum, e.elem, e.n, 0, count)
	for r := range e.n {
		checkBytes(t, e.elem, want, e.read(t, r, buf[r], bytes), "all-reduce-async result, rank %d", r)
		checkBytes(t, e.elem, want, e.read(t, r, out[r], bytes), "compute work queued after all-reduce-async, rank %d", r)
	}
}

func bytesOf(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// tagged returns n bytes that identify rank and the position.
func tagged(rank, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rank*31 + i*7 + 1)
	}
	return b
}

func (e *env) allGather(t *testing.T) {
	for _, count := range []int{0, 1, 7, 1000} {
		bytes := count * e.es
		var want []byte
		for r := range e.n {
			want = append(want, tagged(r, bytes)...)
		}
		for _, inPlace := range []bool{false, true} {
			var send, recv []comm.DevicePtr
			if inPlace {
				recv = e.buffers(t, bytes*e.n, func(r int) []byte {
					b := bytesOf(0xee, bytes*e.n)
					copy(b[r*bytes:], tagged(r, bytes))
					return b
				})
				send = make([]comm.DevicePtr, e.n)
				for r := range e.n {
					send[r] = recv[r] + comm.DevicePtr(r*bytes)
				}
			} else {
				send = e.buffers(t, bytes, func(r int) []byte { return tagged(r, bytes) })
				recv = e.buffers(t, bytes*e.n, nil)
			}
			e.all(t, func(r int) error { return e.b[r].AllGather(send[r], recv[r], bytes) })
			if e.h.NoOp && !inPlace {
				continue
			}
			for r := range e.n {
				checkBytes(t, comm.Uint8, want, e.read(t, r, recv[r], bytes*e.n), "all-gather of %d bytes (in place %v), rank %d", bytes, inPlace, r)
			}
		}
	}
}

func (e *env) broadcast(t *testing.T) {
	for _, bytes := range []int{0, 2, 4098} {
		for root := range e.n {
			ps := e.buffers(t, bytes, func(r int) []byte { return tagged(r, bytes) })
			e.all(t, func(r int) error { return e.b[r].Broadcast(ps[r], bytes, root) })
			for r := range e.n {
				checkBytes(t, comm.Uint8, tagged(root, bytes), e.read(t, r, ps[r], bytes), "broadcast of %d bytes from root %d, rank %d", bytes, root, r)
			}
		}
	}
}

// ring sends every rank's buffer to the next rank and receives from the previous one,
// in one group per rank, on a stream of the caller's.
func (e *env) ring(t *testing.T) {
	const bytes = 1030
	send := e.buffers(t, bytes, func(r int) []byte { return tagged(r, bytes) })
	recv := e.buffers(t, bytes, nil)
	streams := make([]comm.Stream, e.n)
	for r := range e.n {
		s, err := e.inst.NewStream(r)
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.inst.DestroyStream(r, s) })
		streams[r] = s
	}
	e.all(t, func(r int) error {
		b := e.b[r]
		if err := b.GroupStart(); err != nil {
			return err
		}
		if err := b.SendTo(send[r], bytes, (r+1)%e.n, streams[r]); err != nil {
			return errors.Join(err, b.GroupEnd())
		}
		if err := b.RecvFrom(recv[r], bytes, (r+e.n-1)%e.n, streams[r]); err != nil {
			return errors.Join(err, b.GroupEnd())
		}
		if err := b.GroupEnd(); err != nil {
			return err
		}
		return e.inst.SyncStream(r, streams[r])
	})
	if e.h.NoOp {
		return
	}
	for r := range e.n {
		checkBytes(t, comm.Uint8, tagged((r+e.n-1)%e.n, bytes), e.read(t, r, recv[r], bytes), "ring exchange, rank %d", r)
	}
}

// nestedGroups issues two all-reduces inside two nested groups on every rank.
func (e *env) nestedGroups(t *testing.T) {
	const count = 5
	bytes := count * e.es
	a := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
	b := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 3, count) })
	e.all(t, func(r int) error {
		be := e.b[r]
		for range 2 {
			if err := be.GroupStart(); err != nil {
				return err
			}
		}
		errA := be.AllReduce(a[r], bytes)
		errB := be.AllReduce(b[r], bytes)
		return errors.Join(errA, errB, be.GroupEnd(), be.GroupEnd())
	})
	for r := range e.n {
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 0, count), e.read(t, r, a[r], bytes), "first grouped all-reduce, rank %d", r)
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 3, count), e.read(t, r, b[r], bytes), "second grouped all-reduce, rank %d", r)
	}
}

// backendGroupScope checks the group scope across backends of one rank (a pipeline-
// parallel group around a tensor-parallel all-reduce): inside a group opened on the
// world's backend, a sub-group backend's AllReduce is part of the group, and the
// outermost GroupEnd returns with its result in place; AllReduceAsync, which cannot be
// grouped, fails with ErrGroupOpen there.
func (e *env) backendGroupScope(t *testing.T) {
	sp, ok := e.inst.(BackendSplitter)
	e.h.lacking(t, CapSplit, ok, "its instance is no BackendSplitter")
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	color := func(r int) int { return r / 2 } // pairs, the two-rank case of tensor parallelism
	subs, err := sp.SplitBackends(ctx, color)
	if e.skipUnsupported(t, []error{err}, CapSplit, "split") {
		return
	}
	for _, s := range subs {
		t.Cleanup(func() { _ = s.Close() })
	}
	const count = 33
	bytes := count * e.es
	ps := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
	e.all(t, func(r int) error {
		if err := e.b[r].GroupStart(); err != nil {
			return err
		}
		errOp := subs[r].AllReduce(ps[r], bytes)
		errAsync := subs[r].AllReduceAsync(ps[r], bytes, 0)
		errEnd := e.b[r].GroupEnd()
		if errOp != nil || errEnd != nil {
			return errors.Join(errOp, errEnd)
		}
		if !errors.Is(errAsync, comm.ErrGroupOpen) {
			return fmt.Errorf("rank %d: all-reduce-async inside another backend's group returned %v, want ErrGroupOpen", r, errAsync)
		}
		return nil
	})
	for r := range e.n {
		lo := color(r) * 2
		hi := min(lo+2, e.n)
		want := make([]float64, count)
		for i := range want {
			for q := lo; q < hi; q++ {
				want[i] += pattern(comm.Sum, e.elem, e.n, q, i)
			}
		}
		wb, _ := EncodeValues(e.elem, want)
		checkBytes(t, e.elem, wb, e.read(t, r, ps[r], bytes), "sub-group all-reduce inside the world's group, rank %d (group of ranks %d-%d)", r, lo, hi-1)
	}
}

// barrier checks that every rank's Barrier succeeds and that the communicator stays in
// step: a blocking all-reduce afterwards gives the right result.
func (e *env) barrier(t *testing.T) {
	for range 3 {
		e.all(t, func(r int) error { return e.b[r].Barrier() })
	}
	ps := e.buffers(t, 2*e.es, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, 2) })
	e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], 2*e.es) })
	for r := range e.n {
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 0, 2), e.read(t, r, ps[r], 2*e.es), "all-reduce after barriers, rank %d", r)
	}
}

// recvCommand sends a command word from every root: the root broadcasts 4 bytes, the
// others receive them with RecvCommandU32. On the root itself RecvCommandU32 is refused.
func (e *env) recvCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), e.h.Timeout)
	defer cancel()
	for root := range e.n {
		word := []byte{0xde, 0xc0, byte(root), 0x7f}
		ps := e.buffers(t, 4, func(r int) []byte {
			if r == root {
				return word
			}
			return []byte{0, 0, 0, 0}
		})
		require.ErrorIs(t, e.b[root].RecvCommandU32(ctx, ps[root], root), comm.ErrInvalidRank, "recv-command on the root")
		e.all(t, func(r int) error {
			if r == root {
				return e.b[r].Broadcast(ps[r], 4, root)
			}
			return e.b[r].RecvCommandU32(ctx, ps[r], root)
		})
		for r := range e.n {
			checkBytes(t, comm.Uint8, word, e.read(t, r, ps[r], 4), "command word from root %d, rank %d", root, r)
		}
	}
}

// register registers a buffer on every rank, reduces in it, and deregisters it.
func (e *env) register(t *testing.T) {
	const count = 64
	bytes := count * e.es
	ps := e.buffers(t, bytes, func(r int) []byte { return inputs(comm.Sum, e.elem, e.n, r, 0, count) })
	handles := make([]comm.BufferHandle, e.n)
	errs := e.try(t, func(r int) error {
		h, err := e.b[r].RegisterBuffer(ps[r], bytes)
		handles[r] = h
		return err
	})
	e.skipUnsupported(t, errs, CapRegister, "register")
	e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], bytes) })
	for r := range e.n {
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 0, count), e.read(t, r, ps[r], bytes), "all-reduce in a registered buffer, rank %d", r)
	}
	e.all(t, func(r int) error { return e.b[r].DeregisterBuffer(handles[r]) })
	for r := range e.n {
		require.ErrorIs(t, e.b[r].DeregisterBuffer(handles[r]), comm.ErrUnknownHandle, "deregister twice, rank %d", r)
	}
}

// symmetric allocates symmetric memory on every rank (a collective call), reduces in it
// and frees it. Backends without a symmetric allocator must say ErrUnsupported.
func (e *env) symmetric(t *testing.T) {
	const count = 300
	bytes := count * e.es
	ps := make([]comm.DevicePtr, e.n)
	errs := e.try(t, func(r int) error {
		p, err := e.b[r].SymmetricAlloc(bytes)
		ps[r] = p
		return err
	})
	e.skipUnsupported(t, errs, CapSymmetricMemory, "symmetric-alloc")
	for r := range e.n {
		require.NoError(t, e.inst.Write(r, ps[r], inputs(comm.Sum, e.elem, e.n, r, 0, count)))
	}
	e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], bytes) })
	for r := range e.n {
		checkBytes(t, e.elem, expected(comm.Sum, e.elem, e.n, 0, count), e.read(t, r, ps[r], bytes), "all-reduce in symmetric memory, rank %d", r)
	}
	e.all(t, func(r int) error { return e.b[r].SymmetricFree(ps[r]) })
	for r := range e.n {
		require.ErrorIs(t, e.b[r].SymmetricFree(ps[r]), comm.ErrUnknownPointer, "free twice, rank %d", r)
	}
}

var allOps = []comm.ReduceOp{comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg}

// commandsUnderCancellation checks that no command is lost or delivered twice when
// RecvCommandU32's waits end by their context: for each of 40 numbered commands, every
// worker first calls RecvCommandU32 with a context that has already ended (the root
// waits for all of these before it broadcasts), then receives the command with a live
// context; each worker must see every command once, in order.
func (e *env) commandsUnderCancellation(t *testing.T) {
	if e.n < 2 {
		t.Skip("one rank: no worker to send commands to")
	}
	const commands = 40
	ps := e.buffers(t, 4, nil)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	live, stop := context.WithTimeout(context.Background(), e.h.Timeout)
	defer stop()
	tried := make(chan struct{}, e.n)
	e.all(t, func(r int) error {
		for i := range commands {
			word := []byte{byte(i), byte(i >> 8), 0x5a, 0xa5}
			if r == 0 {
				for range e.n - 1 {
					<-tried
				}
				if err := e.inst.Write(0, ps[0], word); err != nil {
					return err
				}
				if err := e.b[0].Broadcast(ps[0], 4, 0); err != nil {
					return fmt.Errorf("command %d: %w", i, err)
				}
				continue
			}
			err := e.b[r].RecvCommandU32(canceled, ps[r], 0)
			tried <- struct{}{}
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("command %d: a receive with an ended context returned %v, want context.Canceled", i, err)
			}
			if err := e.b[r].RecvCommandU32(live, ps[r], 0); err != nil {
				return fmt.Errorf("command %d: %w", i, err)
			}
			got, err := e.inst.Read(r, ps[r], 4)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, word) {
				return fmt.Errorf("command %d: received % x, want % x (a command was lost or repeated)", i, got, word)
			}
		}
		return nil
	})
}

// idleWorker checks that a worker waiting in RecvCommandU32 for longer than the
// operation timeout, with the watchdog on, stays healthy (a wait without deadline is
// not a hang) and then works normally.
func idleWorker(t *testing.T, h Harness) {
	h.lacking(t, CapWatchdog, h.StartWatched != nil, "it has no StartWatched")
	if h.World < 2 {
		t.Skip("one rank: no worker to wait for commands")
	}
	// The operation timeout must exceed what one simulated operation can take on a
	// loaded machine under -race, or the AllReduce at the end is judged hung.
	const timeout = 250 * time.Millisecond
	inst, err := h.StartWatched(comm.BFloat16, timeout)
	require.NoError(t, err, "start %s with a watchdog", h.Name)
	t.Cleanup(func() { _ = inst.Close() })
	e := &env{h: h, inst: inst, b: inst.Backends(), n: h.World, elem: comm.BFloat16, es: 2, mem: inst, count: inst}
	ps := e.buffers(t, 4, func(int) []byte { return []byte{1, 2, 3, 4} })
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	e.all(t, func(r int) error {
		if r == 0 {
			time.Sleep(4 * timeout) // the workers idle for several operation timeouts
			return e.b[0].Broadcast(ps[0], 4, 0)
		}
		return e.b[r].RecvCommandU32(ctx, ps[r], 0)
	})
	for r := range e.n {
		require.True(t, e.b[r].IsHealthy(), "rank %d: an idle worker was judged hung", r)
	}
	e.all(t, func(r int) error { return e.b[r].AllReduce(ps[r], 4) })
}

// typedAsyncErrors checks what a caller sees of an asynchronous library error: the
// raw result (errors.Is(err, nccl.RemoteError)), ErrUnhealthy, the operation and the
// rank in the message, and IsHealthy false.
func (e *env) typedAsyncErrors(t *testing.T) {
	inj, ok := e.inst.(AsyncErrorInjector)
	e.h.lacking(t, CapAsyncErrors, ok, "its instance is no AsyncErrorInjector")
	r := e.n - 1
	if err := inj.InjectAsyncError(r, nccl.RemoteError); errors.Is(err, comm.ErrUnsupported) && !e.h.requires(CapAsyncErrors) {
		t.Skipf("the instance cannot cause asynchronous errors: %v", err)
	} else {
		require.NoError(t, err)
	}
	ps := e.buffers(t, 64, nil)
	err := e.b[r].AllReduce(ps[r], 64)
	if err == nil {
		t.Fatalf("rank %d: all-reduce after an asynchronous ncclRemoteError succeeded", r)
	}
	require.ErrorIs(t, err, nccl.RemoteError, "rank %d: the raw result", r)
	require.ErrorIs(t, err, comm.ErrUnhealthy, "rank %d: the first fatal error", r)
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("all-reduce of 64 bytes on rank %d", r)) {
		t.Fatalf("rank %d: %q names neither the operation nor the rank", r, msg)
	}
	require.False(t, e.b[r].IsHealthy(), "rank %d after the error", r)
}
