//go:build gpu

package commtest_test

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

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
)

// TestGPUConformanceRealNCCL runs the conformance suite on the real NCCL backend and real
// GPUs (build tag gpu). NCCLGO_GPU_WORLD sets the number of ranks (default 1); rank r
// uses device r modulo the visible devices, so more ranks than GPUs need NCCL >= 2.30
// with NCCL_MULTI_RANK_GPU_ENABLE=1. Without a usable driver, GPU or NCCL it skips and
// says why.
func TestGPUConformanceRealNCCL(t *testing.T) {
	world := 1
	if v := os.Getenv("NCCLGO_GPU_WORLD"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("NCCLGO_GPU_WORLD=%q: want a positive integer", v)
		}
		world = n
	}
	ctxs, err := gpuContexts(world)
	if err != nil {
		t.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	if _, err := nccl.NewUniqueID(); err != nil {
		t.Skipf("NCCL unavailable: %v (run make libs; NCCLGO_LIBNCCL selects libnccl)", err)
	}
	var version int32
	if err := rawnccl.GetVersion(&version); err != nil {
		t.Fatalf("ncclGetVersion: %v", err)
	}
	var caps []commtest.Capability // what the loaded NCCL has, by NCCL's release notes
	if version >= 21800 {
		caps = append(caps, commtest.CapSplit)
	}
	if version >= 21900 {
		caps = append(caps, commtest.CapRegister, commtest.CapSymmetricMemory)
	}
	commtest.RunConformance(t, commtest.Harness{
		Name:     fmt.Sprintf("real NCCL %d, %d ranks", version, world),
		World:    world,
		Timeout:  2 * time.Minute,
		Requires: caps,
		Start: func(elem comm.DType) (commtest.Instance, error) {
			return startGPU(ctxs, elem)
		},
	})
}

// gpuContexts returns the primary context of the device of each rank.
func gpuContexts(world int) ([]cuda.Context, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.Init(0); err != nil {
		return nil, err
	}
	var count int32
	if err := cuda.DeviceGetCount(&count); err != nil {
		return nil, err
	}
	if count < 1 {
		return nil, errors.New("no CUDA device")
	}
	ctxs := make([]cuda.Context, world)
	for r := range world {
		var dev cuda.Device
		if err := cuda.DeviceGet(&dev, int32(r)%count); err != nil {
			return nil, err
		}
		if err := cuda.DevicePrimaryCtxRetain(&ctxs[r], dev); err != nil {
			return nil, err
		}
	}
	return ctxs, nil
}

// gpuInstance is a world of real NCCL backends, one per rank, with device memory
// handled through the CUDA driver.
type gpuInstance struct {
	ctxs     []cuda.Context
	backends []*nccl.Backend
}

func startGPU(ctxs []cuda.Context, elem comm.DType) (*gpuInstance, error) {
	world := len(ctxs)
	id, err := nccl.NewUniqueID()
	if err != nil {
		return nil, err
	}
	g := &gpuInstance{ctxs: ctxs, backends: make([]*nccl.Backend, world)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			g.backends[r], errs[r] = nccl.New(ctx, id, r, world, nccl.WithElementType(elem), nccl.WithTimeout(time.Minute))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// on runs f with rank's context current on a locked OS thread.
func (g *gpuInstance) on(rank int, f func() error) error {
	if rank < 0 || rank >= len(g.ctxs) {
		return fmt.Errorf("rank %d out of range [0, %d): %w", rank, len(g.ctxs), comm.ErrInvalidRank)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.CtxSetCurrent(g.ctxs[rank]); err != nil {
		return err
	}
	return f()
}

func (g *gpuInstance) Backends() []comm.Backend {
	out := make([]comm.Backend, len(g.backends))
	for i, b := range g.backends {
		out[i] = b
	}
	return out
}

func (g *gpuInstance) Communicators() []comm.Communicator {
	out := make([]comm.Communicator, len(g.backends))
	for i, b := range g.backends {
		out[i] = b.Communicator()
	}
	return out
}

func (g *gpuInstance) Alloc(rank, bytes int) (comm.DevicePtr, error) {
	var p cuda.Deviceptr
	err := g.on(rank, func() error { return cuda.MemAlloc(&p, uint64(bytes)) })
	if err == nil {
		err = g.Write(rank, comm.DevicePtr(p), make([]byte, bytes))
	}
	return comm.DevicePtr(p), err
}

func (g *gpuInstance) Free(rank int, p comm.DevicePtr) error {
	return g.on(rank, func() error { return cuda.MemFree(cuda.Deviceptr(p)) })
}

func (g *gpuInstance) Write(rank int, p comm.DevicePtr, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return g.on(rank, func() error { return cudatest.Upload(cuda.Deviceptr(p), data) })
}

func (g *gpuInstance) Read(rank int, p comm.DevicePtr, n int) ([]byte, error) {
	out := make([]byte, n)
	if n == 0 {
		return out, nil
	}
	err := g.on(rank, func() error { return cudatest.Download(out, cuda.Deviceptr(p)) })
	return out, err
}

func (g *gpuInstance) NewStream(rank int) (comm.Stream, error) {
	var s cuda.Stream
	err := g.on(rank, func() error { return cuda.StreamCreate(&s, uint32(cuda.StreamNonBlocking)) })
	return comm.Stream(s), err
}

func (g *gpuInstance) DestroyStream(rank int, s comm.Stream) error {
	return g.on(rank, func() error { return cuda.StreamDestroy(cuda.Stream(s)) })
}

func (g *gpuInstance) CopyAsync(rank int, dst, src comm.DevicePtr, bytes int, s comm.Stream) error {
	return g.on(rank, func() error {
		return cuda.MemcpyDtoDAsync(cuda.Deviceptr(dst), cuda.Deviceptr(src), uint64(bytes), cuda.Stream(s))
	})
}

func (g *gpuInstance) SyncStream(rank int, s comm.Stream) error {
	return g.on(rank, func() error { return cuda.StreamSynchronize(cuda.Stream(s)) })
}

func (g *gpuInstance) Close() error {
	errs := make([]error, len(g.backends))
	var wg sync.WaitGroup
	for r, b := range g.backends {
		if b != nil {
			wg.Go(func() {
				if err := b.Close(); err != nil && !errors.Is(err, comm.ErrClosed) {
					errs[r] = err
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
