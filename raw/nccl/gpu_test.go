//go:build gpu

package nccl_test

// GPU checks of the raw NCCL binding (build tag gpu). The GPU bundle (docs/gpu.md) runs
// them on a machine with an NVIDIA GPU and a libnccl (NCCLGO_LIBNCCL, or the pip NCCL):
//
//	go test -tags gpu -run GPU -bench GPU -benchmem ./raw/nccl
//
// Without a driver, a device or a libnccl they skip and say why. Device memory, streams
// and the context come from raw/cuda.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// gpuEnv is device 0 with its retained primary context and the loaded NCCL's version.
type gpuEnv struct {
	ordinal int32
	dev     cuda.Device
	ctx     cuda.Context
	version int
}

// errSkip marks what makes the GPU tests skip: no driver, no device, no libnccl.
var errSkip = errors.New("the GPU tests cannot run here")

var openGPU = sync.OnceValues(func() (*gpuEnv, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.Init(0); err != nil {
		if errors.Is(err, cuda.ErrorNoDevice) || errors.Is(err, cuda.ErrLibraryNotFound) || errors.Is(err, cuda.ErrNeedsCgo) {
			return nil, fmt.Errorf("%w: no usable GPU: cuInit: %w (NCCLGO_LIBCUDA selects libcuda)", errSkip, err)
		}
		return nil, fmt.Errorf("cuInit: %w", err)
	}
	version, err := nccl.LoadedVersion()
	if err != nil {
		return nil, fmt.Errorf("%w: no libnccl: %w (NCCLGO_LIBNCCL selects libnccl)", errSkip, err)
	}
	g := &gpuEnv{version: version}
	err = errors.Join(cuda.DeviceGet(&g.dev, g.ordinal), cuda.DevicePrimaryCtxRetain(&g.ctx, g.dev))
	return g, err
})

// gpu returns the shared device, skipping tb when the tests cannot run here.
func gpu(tb testing.TB) *gpuEnv {
	tb.Helper()
	g, err := openGPU()
	if errors.Is(err, errSkip) {
		tb.Skip(err.Error())
	}
	require.NoError(tb, err)
	return g
}

// on runs f on a locked OS thread with the device's context current, where NCCL (through
// the CUDA runtime) finds the device.
func (g *gpuEnv) on(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.CtxSetCurrent(g.ctx); err != nil {
		return fmt.Errorf("set the context current: %w", err)
	}
	return f()
}

// do is on, failing tb with what was done.
func (g *gpuEnv) do(tb testing.TB, what string, f func() error) {
	tb.Helper()
	require.NoError(tb, g.on(f), what)
}

// ptr gives C a device address (device memory is never in Go's heap).
func ptr(p cuda.Deviceptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// buffer returns n float32 of device memory holding the bytes 0xff (NaN), freed when tb ends.
// Like write, it waits for the device (cudatest): the legacy stream that cuMemsetD8 and
// cuMemcpyHtoD use does not order the non-blocking streams NCCL runs on.
func (g *gpuEnv) buffer(tb testing.TB, n int) cuda.Deviceptr {
	tb.Helper()
	var p cuda.Deviceptr
	g.do(tb, "allocate "+strconv.Itoa(n)+" float32", func() error {
		if err := cuda.MemAlloc(&p, uint64(4*n)); err != nil {
			return err
		}
		return cudatest.Fill(p, 0xff, 4*n)
	})
	tb.Cleanup(func() { g.do(tb, "cuMemFree", func() error { return cuda.MemFree(p) }) })
	return p
}

func (g *gpuEnv) write(tb testing.TB, p cuda.Deviceptr, v []float32) {
	tb.Helper()
	g.do(tb, "upload", func() error { return cudatest.Upload(p, v) })
}

func (g *gpuEnv) read(tb testing.TB, p cuda.Deviceptr, n int) []float32 {
	tb.Helper()
	v := make([]float32, n)
	g.do(tb, "download", func() error { return cudatest.Download(v, p) })
	return v
}

// values returns n float32 that every test op keeps exact: quarters between -2048 and 2048.
func values(n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = scale * (float32(i%16384)/4 - 2048)
	}
	return v
}

// config is NCCL_CONFIG_INITIALIZER, non-blocking when asked.
func config(blocking bool) nccl.Config {
	c := nccl.NewConfig()
	if !blocking {
		c.Blocking = 0
	}
	return c
}

// settle waits, after a call on a non-blocking communicator, until NCCL is done with it:
// the call's own error unless it is InProgress, else the communicator's asynchronous state
// once it leaves InProgress, or ctx's error.
func settle(ctx context.Context, c nccl.Comm, err error) error {
	if err != nil && !errors.Is(err, nccl.InProgress) {
		return err
	}
	for {
		var state nccl.Result
		if err := nccl.CommGetAsyncError(c, &state); err != nil {
			return fmt.Errorf("ncclCommGetAsyncError: %w", err)
		}
		if state != nccl.InProgress {
			if state != nccl.Success {
				return fmt.Errorf("asynchronous error: %w", state)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("communicator still in progress: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// initComm creates rank of an nranks communicator with ncclCommInitRankConfig and waits
// until it is ready; on failure it aborts what was created.
func (g *gpuEnv) initComm(ctx context.Context, nranks, rank int, id nccl.UniqueId, cfg nccl.Config) (nccl.Comm, error) {
	c := new(nccl.Comm) // NCCL may write it after a non-blocking call returns
	var pin runtime.Pinner
	pin.Pin(c)
	defer pin.Unpin()
	err := g.on(func() error {
		err := nccl.CommInitRankConfig(c, int32(nranks), id, int32(rank), &cfg)
		return settle(ctx, *c, err)
	})
	if err != nil && *c != 0 {
		_ = nccl.CommAbort(*c)
		return 0, err
	}
	return *c, err
}

// rank is a ready one-rank communicator with a stream: what a test or benchmark that
// drives NCCL needs. newRank destroys both when tb ends.
type rank struct {
	*gpuEnv
	comm   nccl.Comm
	stream cuda.Stream
}

// newRank sets up a one-rank communicator (blocking or not) and a non-blocking stream.
func (g *gpuEnv) newRank(tb testing.TB, blocking bool) *rank {
	tb.Helper()
	var id nccl.UniqueId
	require.NoError(tb, nccl.GetUniqueId(&id))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := g.initComm(ctx, 1, 0, id, config(blocking))
	require.NoError(tb, err, "one-rank ncclCommInitRankConfig, blocking %v", blocking)
	r := &rank{gpuEnv: g, comm: c}
	g.do(tb, "cuStreamCreate", func() error { return cuda.StreamCreate(&r.stream, uint32(cuda.StreamNonBlocking)) })
	tb.Cleanup(func() {
		g.do(tb, "destroy the rank", func() error { return errors.Join(cuda.StreamDestroy(r.stream), nccl.CommDestroy(r.comm)) })
	})
	return r
}

func (r *rank) sync(tb testing.TB) {
	tb.Helper()
	r.do(tb, "cuStreamSynchronize", func() error { return cuda.StreamSynchronize(r.stream) })
}

// allReduce runs an in-place sum of n float32 at p and waits for it.
func (r *rank) allReduce(tb testing.TB, p cuda.Deviceptr, n int) {
	tb.Helper()
	r.do(tb, "ncclAllReduce", func() error {
		return errors.Join(nccl.AllReduce(ptr(p), ptr(p), uint64(n), nccl.Float32, nccl.Sum, r.comm, nccl.CudaStream(r.stream)),
			cuda.StreamSynchronize(r.stream))
	})
}

func TestGPUCommInitRankConfigBlockingAndNonBlocking(t *testing.T) {
	g := gpu(t)
	t.Logf("NCCL %s from %s", nccl.FormatVersion(g.version), nccl.LibraryInfo().Path)
	for _, blocking := range []bool{true, false} {
		t.Run(fmt.Sprintf("blocking %v", blocking), func(t *testing.T) {
			var id nccl.UniqueId
			require.NoError(t, nccl.GetUniqueId(&id))
			assert.NotEqual(t, nccl.UniqueId{}, id)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := g.initComm(ctx, 1, 0, id, config(blocking))
			require.NoError(t, err)
			require.NotZero(t, c)

			var count, user, dev int32
			var state nccl.Result
			require.NoError(t, errors.Join(nccl.CommCount(c, &count), nccl.CommUserRank(c, &user),
				nccl.CommCuDevice(c, &dev), nccl.CommGetAsyncError(c, &state)))
			assert.EqualValues(t, 1, count)
			assert.EqualValues(t, 0, user)
			assert.Equal(t, g.ordinal, dev)
			assert.Equal(t, nccl.Success, state)

			// One all-reduce, then the orderly end: finalize (polled when non-blocking), destroy.
			r := &rank{gpuEnv: g, comm: c}
			g.do(t, "cuStreamCreate", func() error { return cuda.StreamCreate(&r.stream, 0) })
			p := g.buffer(t, 1024)
			g.write(t, p, values(1024, 1))
			r.do(t, "all-reduce", func() error {
				err := nccl.AllReduce(ptr(p), ptr(p), 1024, nccl.Float32, nccl.Sum, c, nccl.CudaStream(r.stream))
				return errors.Join(settle(ctx, c, err), cuda.StreamSynchronize(r.stream), cuda.StreamDestroy(r.stream))
			})
			requireSame(t, values(1024, 1), g.read(t, p, 1024), "in-place all-reduce")
			g.do(t, "finalize and destroy", func() error {
				return errors.Join(settle(ctx, c, nccl.CommFinalize(c)), nccl.CommDestroy(c))
			})
		})
	}
}

func TestGPUCommAbortEndsACommunicatorWithWorkQueued(t *testing.T) {
	g := gpu(t)
	var id nccl.UniqueId
	require.NoError(t, nccl.GetUniqueId(&id))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := g.initComm(ctx, 1, 0, id, config(true))
	require.NoError(t, err)
	p := g.buffer(t, 1<<20)
	g.do(t, "all-reduce then abort", func() error {
		return errors.Join(nccl.AllReduce(ptr(p), ptr(p), 1<<20, nccl.Float32, nccl.Sum, c, 0), nccl.CommAbort(c))
	})
}

func TestGPUEveryCollectiveOnOneRank(t *testing.T) {
	g := gpu(t)
	r := g.newRank(t, true)
	const n = 1<<16 + 3
	s := nccl.CudaStream(r.stream)
	three := float32(3)
	cases := []struct {
		name    string
		inPlace bool
		scale   float32 // recv = scale * send on one rank
		call    func(send, recv unsafe.Pointer) error
	}{
		{"AllReduce sum out of place", false, 1, func(a, b unsafe.Pointer) error { return nccl.AllReduce(a, b, n, nccl.Float32, nccl.Sum, r.comm, s) }},
		{"AllReduce sum in place", true, 1, func(a, b unsafe.Pointer) error { return nccl.AllReduce(a, b, n, nccl.Float32, nccl.Sum, r.comm, s) }},
		{"AllReduce pre-multiplied sum by 3", false, 3, func(a, b unsafe.Pointer) error {
			var op nccl.RedOp
			if err := nccl.RedOpCreatePreMulSum(&op, unsafe.Pointer(&three), nccl.Float32, nccl.ScalarHostImmediate, r.comm); err != nil {
				return err
			}
			return errors.Join(nccl.AllReduce(a, b, n, nccl.Float32, op, r.comm, s), nccl.RedOpDestroy(op, r.comm))
		}},
		{"Reduce max to root 0", false, 1, func(a, b unsafe.Pointer) error { return nccl.Reduce(a, b, n, nccl.Float32, nccl.Max, 0, r.comm, s) }},
		{"Broadcast from root 0", false, 1, func(a, b unsafe.Pointer) error { return nccl.Broadcast(a, b, n, nccl.Float32, 0, r.comm, s) }},
		{"Bcast in place", true, 1, func(a, _ unsafe.Pointer) error { return nccl.Bcast(a, n, nccl.Float32, 0, r.comm, s) }},
		{"AllGather", false, 1, func(a, b unsafe.Pointer) error { return nccl.AllGather(a, b, n, nccl.Float32, r.comm, s) }},
		{"ReduceScatter sum", false, 1, func(a, b unsafe.Pointer) error { return nccl.ReduceScatter(a, b, n, nccl.Float32, nccl.Sum, r.comm, s) }},
		{"AlltoAll", false, 1, func(a, b unsafe.Pointer) error { return nccl.AlltoAll(a, b, n, nccl.Float32, r.comm, s) }},
		{"Gather to root 0", false, 1, func(a, b unsafe.Pointer) error { return nccl.Gather(a, b, n, nccl.Float32, 0, r.comm, s) }},
		{"Scatter from root 0", false, 1, func(a, b unsafe.Pointer) error { return nccl.Scatter(a, b, n, nccl.Float32, 0, r.comm, s) }},
		{"Send and Recv to self in a group", false, 1, func(a, b unsafe.Pointer) error {
			return errors.Join(nccl.GroupStart(), nccl.Send(a, n, nccl.Float32, 0, r.comm, s), nccl.Recv(b, n, nccl.Float32, 0, r.comm, s), nccl.GroupEnd())
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			send := g.buffer(t, n)
			recv := send
			if !tc.inPlace {
				recv = g.buffer(t, n)
			}
			in := values(n, float32(i+1))
			g.write(t, send, in)
			err := g.on(func() error { return tc.call(ptr(send), ptr(recv)) })
			if errors.Is(err, nccl.ErrSymbolNotFound) {
				t.Skipf("not in NCCL %s: %v", nccl.FormatVersion(g.version), err)
			}
			require.NoError(t, err)
			r.sync(t)
			want := in
			if tc.scale != 1 {
				want = values(n, float32(i+1)*tc.scale)
			}
			requireSame(t, want, r.read(t, recv, n), "%s", tc.name)
		})
	}
}

func TestGPUBadArgumentsAreInvalidArgument(t *testing.T) {
	g := gpu(t)
	r := g.newRank(t, true)
	p := g.buffer(t, 16)
	var id nccl.UniqueId
	require.NoError(t, nccl.GetUniqueId(&id))
	cases := []struct {
		name string
		call func() error
	}{
		{"unknown data type", func() error {
			return nccl.AllReduce(ptr(p), ptr(p), 16, nccl.DataType(99), nccl.Sum, r.comm, nccl.CudaStream(r.stream))
		}},
		{"unknown reduction", func() error {
			return nccl.AllReduce(ptr(p), ptr(p), 16, nccl.Float32, nccl.RedOp(99), r.comm, nccl.CudaStream(r.stream))
		}},
		{"broadcast root out of range", func() error {
			return nccl.Broadcast(ptr(p), ptr(p), 16, nccl.Float32, 1, r.comm, nccl.CudaStream(r.stream))
		}},
		{"config not from NewConfig", func() error {
			var c nccl.Comm
			cfg := nccl.Config{Size: uint64(unsafe.Sizeof(nccl.Config{}))}
			return nccl.CommInitRankConfig(&c, 1, id, 0, &cfg)
		}},
		{"rank not below the rank count", func() error {
			var c nccl.Comm
			cfg := nccl.NewConfig()
			return nccl.CommInitRankConfig(&c, 1, id, 1, &cfg)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := g.on(tc.call)
			require.ErrorIs(t, err, nccl.InvalidArgument)
			var ne *nccl.Error
			require.ErrorAs(t, err, &ne)
			t.Logf("%v", err)
		})
	}
}

func TestGPURegistrationAndNCCLMemory(t *testing.T) {
	g := gpu(t)
	r := g.newRank(t, true)
	const n = 1 << 20
	in := values(n, 1)

	t.Run("CommRegister and CommDeregister a cuMemAlloc buffer", func(t *testing.T) {
		p := g.buffer(t, n)
		g.write(t, p, in)
		var h unsafe.Pointer
		g.do(t, "ncclCommRegister", func() error { return nccl.CommRegister(r.comm, ptr(p), 4*n, &h) })
		r.allReduce(t, p, n)
		g.do(t, "ncclCommDeregister", func() error { return nccl.CommDeregister(r.comm, h) })
		requireSame(t, in, r.read(t, p, n), "all-reduce of a registered buffer")
	})

	// ncclMemAlloc's memory, used by an all-reduce and, where NCCL has windows, registered
	// as a symmetric window.
	var mem unsafe.Pointer
	g.do(t, "ncclMemAlloc", func() error { return nccl.MemAlloc(&mem, 4*n) })
	t.Cleanup(func() { g.do(t, "ncclMemFree", func() error { return nccl.MemFree(mem) }) })
	require.NotNil(t, mem)
	p := cuda.Deviceptr(uintptr(mem))

	t.Run("MemAlloc memory in an all-reduce", func(t *testing.T) {
		g.write(t, p, in)
		r.allReduce(t, p, n)
		requireSame(t, in, r.read(t, p, n), "all-reduce of ncclMemAlloc memory")
	})

	t.Run("CommWindowRegister and CommWindowDeregister", func(t *testing.T) {
		var win nccl.Window
		err := g.on(func() error { return nccl.CommWindowRegister(r.comm, mem, 4*n, &win, nccl.WinCollSymmetric) })
		if errors.Is(err, nccl.ErrSymbolNotFound) {
			require.Less(t, g.version, nccl.Version(2, 27, 3), "ncclCommWindowRegister is in every NCCL from 2.27.3")
			t.Skipf("NCCL %s has no windows: %v", nccl.FormatVersion(g.version), err)
		}
		require.NoError(t, err)
		if win != 0 {
			var user unsafe.Pointer
			err := g.on(func() error { return nccl.WinGetUserPtr(r.comm, win, &user) })
			if !errors.Is(err, nccl.ErrSymbolNotFound) {
				require.NoError(t, err)
				assert.Equal(t, mem, user, "the window's user pointer is the registered buffer")
			}
		}
		g.write(t, p, values(n, 2))
		r.allReduce(t, p, n)
		requireSame(t, values(n, 2), r.read(t, p, n), "all-reduce of a window buffer")
		if win == 0 {
			t.Skipf("NCCL %s registered no window on this communicator (no symmetric memory support)", nccl.FormatVersion(g.version))
		}
		g.do(t, "ncclCommWindowDeregister", func() error { return nccl.CommWindowDeregister(r.comm, win) })
	})
}

// twoRanks returns the two communicators of one world on device 0, each created from one
// unique id on a goroutine locked to its OS thread, finalized and destroyed when t ends
// unless the test aborts them first (aborted[rank] = true). NCCL allows two ranks on one
// GPU from 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1: when the environment lacks it, twoRanks
// runs the test again in a child process that has it and returns nil (the caller returns).
func (g *gpuEnv) twoRanks(t *testing.T, aborted *[2]bool) []nccl.Comm {
	t.Helper()
	if g.version < nccl.Version(2, 30, 0) {
		t.Skipf("NCCL %s: two ranks on one GPU need NCCL ≥ 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1", nccl.FormatVersion(g.version))
	}
	if os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE") != "1" {
		dltest.RunChild(t, t.Name(), "NCCL_MULTI_RANK_GPU_ENABLE=1")
		return nil
	}
	const world = 2
	var id nccl.UniqueId
	require.NoError(t, nccl.GetUniqueId(&id))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	comms := make([]nccl.Comm, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for rk := range world {
		wg.Go(func() {
			if comms[rk], errs[rk] = g.initComm(ctx, world, rk, id, config(false)); errs[rk] != nil {
				cancel() // the other rank would wait for this one until the deadline
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for rk, c := range comms {
			if c != 0 && (aborted == nil || !aborted[rk]) {
				wg.Go(func() {
					assert.NoError(t, g.on(func() error { return errors.Join(settle(ctx, c, nccl.CommFinalize(c)), nccl.CommDestroy(c)) }))
				})
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); errors.Is(err, nccl.InvalidUsage) {
		t.Skipf("NCCL %s refuses two ranks on one GPU: %v", nccl.FormatVersion(g.version), err)
	}
	require.NoError(t, errors.Join(errs...), "grouped init of two ranks on one GPU")
	return comms
}

// onRanks runs f(rank) for both ranks at once, each on its own goroutine with the
// device's context current, and returns their errors joined.
func (g *gpuEnv) onRanks(f func(rank int) error) error {
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for rk := range 2 {
		wg.Go(func() { errs[rk] = g.on(func() error { return f(rk) }) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// allReduceOn runs an in-place float32 sum of n elements at p on a fresh stream of rank's
// communicator c and waits for it (or ctx).
func allReduceOn(ctx context.Context, c nccl.Comm, p cuda.Deviceptr, n int) error {
	var s cuda.Stream
	if err := cuda.StreamCreate(&s, uint32(cuda.StreamNonBlocking)); err != nil {
		return err
	}
	defer cuda.StreamDestroy(s)
	err := settle(ctx, c, nccl.AllReduce(ptr(p), ptr(p), uint64(n), nccl.Float32, nccl.Sum, c, nccl.CudaStream(s)))
	return errors.Join(err, waitStream(ctx, s))
}

// TestGPUTwoRanksOnOneGPUAllReduce runs two ranks on device 0 and checks the sum of their
// data through cuMemAlloc memory, through a buffer both register (ncclCommRegister), and
// through ncclMemAlloc memory registered as a symmetric window (ncclCommWindowRegister,
// where the library has it): on two ranks a sum is no copy, so the data shows whether
// NCCL read each rank's buffer.
func TestGPUTwoRanksOnOneGPUAllReduce(t *testing.T) {
	g := gpu(t)
	comms := g.twoRanks(t, nil)
	if comms == nil {
		return
	}
	const n = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	check := func(t *testing.T, bufs [2]cuda.Deviceptr, scale float32) {
		t.Helper()
		for rk := range 2 {
			g.write(t, bufs[rk], values(n, scale*float32(rk+1)))
		}
		require.NoError(t, g.onRanks(func(rk int) error { return allReduceOn(ctx, comms[rk], bufs[rk], n) }))
		for rk := range 2 {
			requireSame(t, values(n, 3*scale), g.read(t, bufs[rk], n), "rank %d", rk)
		}
	}

	t.Run("cuMemAlloc memory", func(t *testing.T) {
		check(t, [2]cuda.Deviceptr{g.buffer(t, n), g.buffer(t, n)}, 1)
	})

	t.Run("registered buffers", func(t *testing.T) {
		bufs := [2]cuda.Deviceptr{g.buffer(t, n), g.buffer(t, n)}
		var handles [2]unsafe.Pointer
		require.NoError(t, g.onRanks(func(rk int) error { return nccl.CommRegister(comms[rk], ptr(bufs[rk]), 4*n, &handles[rk]) }), "ncclCommRegister on both ranks")
		check(t, bufs, 2)
		check(t, bufs, 4) // the registration serves again
		require.NoError(t, g.onRanks(func(rk int) error { return nccl.CommDeregister(comms[rk], handles[rk]) }))
	})

	t.Run("symmetric window", func(t *testing.T) {
		var mems [2]unsafe.Pointer
		require.NoError(t, g.onRanks(func(rk int) error { return nccl.MemAlloc(&mems[rk], 4*n) }), "ncclMemAlloc")
		t.Cleanup(func() {
			assert.NoError(t, g.onRanks(func(rk int) error { return nccl.MemFree(mems[rk]) }))
		})
		var wins [2]nccl.Window
		err := g.onRanks(func(rk int) error {
			return nccl.CommWindowRegister(comms[rk], mems[rk], 4*n, &wins[rk], nccl.WinCollSymmetric)
		})
		if errors.Is(err, nccl.ErrSymbolNotFound) {
			t.Skipf("NCCL %s has no windows: %v", nccl.FormatVersion(g.version), err)
		}
		require.NoError(t, err, "ncclCommWindowRegister on both ranks (collective)")
		bufs := [2]cuda.Deviceptr{cuda.Deviceptr(uintptr(mems[0])), cuda.Deviceptr(uintptr(mems[1]))}
		check(t, bufs, 8)
		if wins[0] == 0 || wins[1] == 0 {
			t.Skipf("NCCL %s registered no window (no symmetric memory on this system); the data went through ncclMemAlloc memory", nccl.FormatVersion(g.version))
		}
		require.NoError(t, g.onRanks(func(rk int) error { return nccl.CommWindowDeregister(comms[rk], wins[rk]) }))
	})
}

// TestGPUAbortReturnsAPendingAllReduce: rank 0 starts an all-reduce that rank 1 never
// joins, so it cannot complete (once enqueued, its stream is not done 200 ms later,
// whatever load the machine has; it may still be InProgress, NCCL connecting the ranks at
// their first operation); ncclCommAbort on both ranks must return and end it, so that rank 0's
// stream drains (cuStreamQuery stops saying not ready) instead of hanging.
// It runs in a child process, so that whatever the abort leaves in the context cannot
// reach the other tests.
func TestGPUAbortReturnsAPendingAllReduce(t *testing.T) {
	g := gpu(t)
	if g.version >= nccl.Version(2, 30, 0) && !dltest.InChild() {
		dltest.RunChild(t, t.Name(), "NCCL_MULTI_RANK_GPU_ENABLE=1")
		return
	}
	var aborted [2]bool
	comms := g.twoRanks(t, &aborted)
	if comms == nil {
		return
	}
	const n = 1 << 16
	p := g.buffer(t, n)
	var s cuda.Stream
	g.do(t, "cuStreamCreate", func() error { return cuda.StreamCreate(&s, uint32(cuda.StreamNonBlocking)) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// On a non-blocking communicator the call may return InProgress: NCCL connects the
	// ranks at their first operation and rank 1 never comes.
	err := g.on(func() error {
		return nccl.AllReduce(ptr(p), ptr(p), n, nccl.Float32, nccl.Sum, comms[0], nccl.CudaStream(s))
	})
	if !errors.Is(err, nccl.InProgress) {
		require.NoError(t, err, "all-reduce on rank 0 alone")
	}
	time.Sleep(200 * time.Millisecond) // rank 0 is now waiting for rank 1, wherever it waits
	var before error
	_ = g.on(func() error { before = cuda.StreamQuery(s); return nil })
	t.Logf("rank 0's all-reduce: %v; its stream before the abort: %v", err, before)
	if err == nil { // enqueued: the kernel is on the stream and cannot finish alone
		require.NotErrorIs(t, nil2ok(before), errDone, "rank 0's lone all-reduce finished without its peer")
	}

	// ncclCommAbort on both ranks returns, and so does the pending operation: the stream
	// drains (whether it reports success or the aborted kernel's error is NCCL's business).
	aborted = [2]bool{true, true}
	done := make(chan error, 1)
	go func() { done <- g.onRanks(func(rk int) error { return nccl.CommAbort(comms[rk]) }) }()
	select {
	case err := <-done:
		require.NoError(t, err, "ncclCommAbort on both ranks")
	case <-ctx.Done():
		t.Fatal("ncclCommAbort did not return within 2 minutes")
	}
	err = g.on(func() error { return waitStream(ctx, s) })
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the pending all-reduce did not return after ncclCommAbort")
	t.Logf("rank 0's stream after the abort: %v", err)
	g.do(t, "cuStreamDestroy", func() error { return cuda.StreamDestroy(s) })
}

// errDone stands for a stream whose work is done (cuStreamQuery returned success).
var errDone = errors.New("stream done")

// nil2ok turns cuStreamQuery's nil (done) into errDone, so that "not done" is testable.
func nil2ok(err error) error {
	if err == nil {
		return errDone
	}
	return err
}

// waitStream polls s until its work is done, or ctx ends.
func waitStream(ctx context.Context, s cuda.Stream) error {
	for {
		err := cuda.StreamQuery(s)
		if !errors.Is(err, cuda.ErrorNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream still busy: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// BenchmarkGPURawAllReduceSmall measures the per-call cost of ncclAllReduce (in-place
// float32 sum, one rank, on a stream) for small messages, synchronizing every syncEvery
// calls: the baseline for comm's own AllReduce.
func BenchmarkGPURawAllReduceSmall(b *testing.B) {
	g := gpu(b)
	r := g.newRank(b, true)
	const syncEvery = 64
	p := g.buffer(b, 64<<10/4)
	for _, bytes := range []int{8, 64, 512, 4 << 10, 64 << 10} {
		b.Run(strconv.Itoa(bytes)+"B", func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			require.NoError(b, cuda.CtxSetCurrent(g.ctx))
			count := uint64(bytes / 4)
			b.SetBytes(int64(bytes))
			calls := 0
			for b.Loop() {
				if err := nccl.AllReduce(ptr(p), ptr(p), count, nccl.Float32, nccl.Sum, r.comm, nccl.CudaStream(r.stream)); err != nil {
					b.Fatal(err)
				}
				if calls++; calls%syncEvery == 0 {
					if err := cuda.StreamSynchronize(r.stream); err != nil {
						b.Fatal(err)
					}
				}
			}
			require.NoError(b, cuda.StreamSynchronize(r.stream))
		})
	}
}

// requireSame fails t at the first element where got differs from want, with the number
// that differ (a diff of a million elements says less).
func requireSame[T comparable](t *testing.T, want, got []T, msg string, args ...any) {
	t.Helper()
	what := fmt.Sprintf(msg, args...)
	require.Len(t, got, len(want), what)
	bad, first := 0, -1
	for i := range want {
		if want[i] != got[i] {
			if bad++; first < 0 {
				first = i
			}
		}
	}
	if bad > 0 {
		require.Failf(t, "contents differ", "%s: %d of %d elements, first at %d: got %v, want %v",
			what, bad, len(want), first, got[first], want[first])
	}
}
