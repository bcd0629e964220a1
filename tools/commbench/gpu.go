package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/raw/cuda"
)

// gpuRank is one GPU of this process: comm's NCCL backend on it and its memory through
// the CUDA driver's primary context.
type gpuRank struct {
	b   *nccl.Backend
	dev cuda.Device
	ctx cuda.Context
	// stream is the rank's stream for -G, created by the first Capture: graphs are
	// captured and launched on it.
	stream cuda.Stream
}

func (g *gpuRank) Comm() comm.Communicator { return g.b.Communicator() }

// onDevice runs f on a locked OS thread with the rank's context current.
func (g *gpuRank) onDevice(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cuda.CtxSetCurrent(g.ctx); err != nil {
		return fmt.Errorf("cuCtxSetCurrent: %w", err)
	}
	return f()
}

func (g *gpuRank) Alloc(bytes int64) (comm.DevicePtr, error) {
	var p cuda.Deviceptr
	err := g.onDevice(func() error { return cuda.MemAlloc(&p, uint64(bytes)) })
	return comm.DevicePtr(p), err
}

func (g *gpuRank) Free(p comm.DevicePtr) error {
	return g.onDevice(func() error { return cuda.MemFree(cuda.Deviceptr(p)) })
}

// Write copies data to p and waits until the copy has landed (a copy from pageable
// memory may return before it completes, and NCCL's stream does not wait for it).
func (g *gpuRank) Write(p comm.DevicePtr, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return g.onDevice(func() error {
		if err := cuda.MemcpyHtoD(cuda.Deviceptr(p), unsafe.Pointer(&data[0]), uint64(len(data))); err != nil {
			return err
		}
		return cuda.CtxSynchronize()
	})
}

// Capture records what record issues, on the rank's own stream, into a CUDA graph and
// instantiates it. The capture is thread-local, as nccl-tests captures, so that the
// ranks of this process capture at once; the goroutine stays on its thread, with the
// rank's context current, until the capture has ended.
func (g *gpuRank) Capture(record func(c comm.Communicator) error) (graph, error) {
	var exec cuda.GraphExec
	var v nccl.StreamComm
	err := g.onDevice(func() error {
		if g.stream == 0 {
			if err := cuda.StreamCreate(&g.stream, uint32(cuda.StreamNonBlocking)); err != nil {
				return fmt.Errorf("cuStreamCreate: %w", err)
			}
		}
		var err error
		if v, err = g.b.Communicator().OnStream(comm.Stream(g.stream)); err != nil {
			return err
		}
		if err := cuda.StreamBeginCapture(g.stream, cuda.StreamCaptureModeThreadLocal); err != nil {
			return fmt.Errorf("cuStreamBeginCapture: %w", err)
		}
		recErr := record(v)
		var cg cuda.Graph
		if err := cuda.StreamEndCapture(g.stream, &cg); err != nil {
			return errors.Join(recErr, fmt.Errorf("cuStreamEndCapture: %w", err))
		}
		defer cuda.GraphDestroy(cg)
		if recErr != nil {
			return recErr
		}
		if err := cuda.GraphInstantiate(&exec, cg, 0); err != nil {
			return fmt.Errorf("cuGraphInstantiate: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gpuGraph{r: g, exec: exec, v: v}, nil
}

// gpuGraph is an instantiated CUDA graph of one GPU rank.
type gpuGraph struct {
	r    *gpuRank
	exec cuda.GraphExec
	v    nccl.StreamComm
}

func (g gpuGraph) Launch() error {
	return g.r.onDevice(func() error { return cuda.GraphLaunch(g.exec, g.r.stream) })
}

func (g gpuGraph) Wait(ctx context.Context) error { return g.v.Sync(ctx) }

func (g gpuGraph) Destroy() error {
	return g.r.onDevice(func() error { return cuda.GraphExecDestroy(g.exec) })
}

func (g *gpuRank) Read(p comm.DevicePtr, n int64) ([]byte, error) {
	buf := make([]byte, n)
	if n == 0 {
		return buf, nil
	}
	err := g.onDevice(func() error { return cuda.MemcpyDtoH(unsafe.Pointer(&buf[0]), cuda.Deviceptr(p), uint64(n)) })
	return buf, err
}

// openGPUs starts one rank of comm's NCCL backend per GPU (the first n, or every
// visible one for n = 0), all in this process.
func openGPUs(ctx context.Context, n int) (*world, error) {
	if err := cuda.Init(0); err != nil {
		return nil, fmt.Errorf("no GPU to measure (cuInit: %w); run with -sim N to measure the software layers on the simulator", err)
	}
	var count int32
	if err := cuda.DeviceGetCount(&count); err != nil {
		return nil, fmt.Errorf("cuDeviceGetCount: %w", err)
	}
	switch {
	case count == 0:
		return nil, errors.New("no GPU to measure; run with -sim N to measure the software layers on the simulator")
	case n == 0:
		n = int(count)
	case n > int(count) && os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE") != "1":
		return nil, fmt.Errorf("-g %d: only %d GPUs are visible (with NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1 lets ranks share a GPU)", n, count)
	}
	id, err := nccl.NewUniqueID()
	if err != nil {
		return nil, fmt.Errorf("creating the NCCL unique id: %w", err)
	}
	ranks := make([]*gpuRank, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ranks[i], errs[i] = openGPU(ctx, id, i, n, i%int(count))
		}()
	}
	wg.Wait()
	w := &world{}
	for _, r := range ranks {
		if r != nil {
			w.ranks = append(w.ranks, r)
		}
	}
	w.close = func() error {
		var errs []error
		for _, r := range ranks {
			if r == nil {
				continue
			}
			if r.stream != 0 {
				errs = append(errs, r.onDevice(func() error { return cuda.StreamDestroy(r.stream) }))
			}
			errs = append(errs, r.b.Close(), cuda.DevicePrimaryCtxRelease(r.dev))
		}
		return errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, w.close())
	}
	host, _ := os.Hostname()
	for i, r := range ranks {
		name := make([]byte, 128)
		_ = cuda.DeviceGetName(&name[0], int32(len(name)), r.dev)
		bus := make([]byte, 32)
		_ = cuda.DeviceGetPCIBusId(&bus[0], int32(len(bus)), r.dev)
		w.devices = append(w.devices, fmt.Sprintf("Rank %2d Group  0 Pid %6d on %10s device %2d [%s] %s",
			i, os.Getpid(), host, i%int(count), cstr(bus), cstr(name)))
	}
	return w, nil
}

// openGPU starts rank i of n on device dev.
func openGPU(ctx context.Context, id comm.UniqueID, i, n, dev int) (*gpuRank, error) {
	g := &gpuRank{}
	if err := cuda.DeviceGet(&g.dev, int32(dev)); err != nil {
		return nil, fmt.Errorf("rank %d: cuDeviceGet: %w", i, err)
	}
	if err := cuda.DevicePrimaryCtxRetain(&g.ctx, g.dev); err != nil {
		return nil, fmt.Errorf("rank %d: cuDevicePrimaryCtxRetain: %w", i, err)
	}
	b, err := nccl.New(ctx, id, i, n, nccl.WithDevice(dev), nccl.WithName(fmt.Sprintf("commbench-%d", i)))
	if err != nil {
		return nil, errors.Join(err, cuda.DevicePrimaryCtxRelease(g.dev))
	}
	g.b = b
	return g, nil
}

// cstr is the text of a NUL-terminated buffer.
func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
