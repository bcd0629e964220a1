//go:build gpu && cgo

package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

// gpuGraphRank is a one-rank communicator on device 0 with a caller stream, for the
// CUDA graph test and benchmark. The calling goroutine stays locked to its thread with
// the device current until done.
type gpuGraphRank struct {
	b    *Backend
	c    *Communicator
	s    gpulib.Stream
	v    StreamComm
	done func()
}

func newGPUGraphRank(tb testing.TB) *gpuGraphRank {
	tb.Helper()
	if err := cuda.Init(0); err != nil {
		tb.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(tb, err)
	b, err := New(ctx, id, 0, 1, WithElementType(comm.Float32), WithDevice(0), WithTimeout(30*time.Second))
	require.NoError(tb, err)
	runtime.LockOSThread()
	g := &gpuGraphRank{b: b, c: b.Communicator()}
	require.NoError(tb, b.c.d.SetDevice())
	g.s, err = b.c.d.StreamCreate()
	require.NoError(tb, err)
	g.v, err = g.c.OnStream(comm.Stream(g.s))
	require.NoError(tb, err)
	g.done = func() {
		assert.NoError(tb, b.c.d.StreamDestroy(g.s))
		assert.NoError(tb, b.Close())
		runtime.UnlockOSThread()
	}
	return g
}

func (g *gpuGraphRank) alloc(tb testing.TB, bytes int) gpulib.Ptr {
	tb.Helper()
	p, err := g.b.c.d.MemAlloc(uint64(bytes))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = g.b.c.d.MemFree(p) })
	return p
}

// captureStep records step on the rank's stream into an instantiated CUDA graph.
func (g *gpuGraphRank) captureStep(tb testing.TB, step func() error) cuda.GraphExec {
	tb.Helper()
	s := cuda.Stream(g.s)
	require.NoError(tb, cuda.StreamBeginCapture(s, cuda.StreamCaptureModeGlobal))
	stepErr := step()
	var graph cuda.Graph
	endErr := cuda.StreamEndCapture(s, &graph)
	require.NoError(tb, errors.Join(stepErr, endErr))
	defer func() { assert.NoError(tb, cuda.GraphDestroy(graph)) }()
	var exec cuda.GraphExec
	require.NoError(tb, cuda.GraphInstantiate(&exec, graph, 0))
	tb.Cleanup(func() { _ = cuda.GraphExecDestroy(exec) })
	return exec
}

// TestGPUGraphAllReduce captures an out-of-place all-reduce (PreMulSum by 2, so that
// the reduction shows on one rank) on a caller's stream, with the copy of its input,
// into a real CUDA graph and replays it 100 times with a new input each time, checking
// every result; what waits for its work is refused during the capture.
func TestGPUGraphAllReduce(t *testing.T) {
	g := newGPUGraphRank(t)
	defer g.done()
	const count = 1024
	const bytes = count * 4
	in, send, recv := g.alloc(t, bytes), g.alloc(t, bytes), g.alloc(t, bytes)
	twice, err := g.c.PreMulSum(comm.Float32, 2)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	exec := g.captureStep(t, func() error {
		capturing, err := g.c.IsCapturing(comm.Stream(g.s))
		if err != nil || !capturing {
			return fmt.Errorf("stream capturing %v: %v", capturing, err)
		}
		if err := g.v.Sync(ctx); !errors.Is(err, ErrCapturing) {
			return fmt.Errorf("Sync during capture: got %v, want ErrCapturing", err)
		}
		if err := g.v.Barrier(ctx); !errors.Is(err, ErrCapturing) {
			return fmt.Errorf("Barrier during capture: got %v, want ErrCapturing", err)
		}
		return errors.Join(
			g.b.c.d.MemcpyDtoDAsync(send, in, bytes, g.s),
			g.v.AllReduceInto(comm.DevicePtr(send), comm.DevicePtr(recv), count, comm.Float32, twice))
	})

	host := make([]byte, bytes)
	out := make([]byte, bytes)
	for k := range 100 {
		for i := range count {
			binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(k*count+i)))
		}
		require.NoError(t, cudatest.Upload(cuda.Deviceptr(in), host))
		require.NoError(t, cuda.GraphLaunch(exec, cuda.Stream(g.s)))
		require.NoError(t, g.v.Sync(ctx))
		require.NoError(t, cuda.MemcpyDtoH(unsafe.Pointer(&out[0]), cuda.Deviceptr(recv), bytes))
		for i := range count {
			got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
			if want := 2 * float32(k*count+i); got != want {
				t.Fatalf("replay %d element %d: got %v, want %v", k, i, got, want)
			}
		}
	}
	assert.True(t, g.c.IsHealthy())
}

// BenchmarkGPUGraphAllReduce compares, in the same run, a decode-like step of 8
// in-place all-reduces on a caller's stream replayed as one CUDA graph (cuGraphLaunch
// + cuStreamSynchronize) with the same 8 operations enqueued one by one
// (StreamComm.AllReduce x 8 + cuStreamSynchronize). graph/eager below 1 is the gain of
// capturing; one rank on device 0.
func BenchmarkGPUGraphAllReduce(b *testing.B) {
	g := newGPUGraphRank(b)
	defer g.done()
	const ops = 8
	const maxBytes = 64 << 10
	buf := g.alloc(b, maxBytes)
	require.NoError(b, cudatest.Fill(cuda.Deviceptr(buf), 0, maxBytes))
	for _, size := range []int{8, 4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			count := size / 4
			step := func() error {
				var err error
				for range ops {
					err = errors.Join(err, g.v.AllReduce(comm.DevicePtr(buf), count, comm.Float32, comm.Sum))
				}
				return err
			}
			exec := g.captureStep(b, step)
			var failed error
			note := func(err error) {
				if err != nil && failed == nil {
					failed = err
				}
			}
			s := cuda.Stream(g.s)
			graph := func(n int) {
				for range n {
					note(cuda.GraphLaunch(exec, s))
					note(cuda.StreamSynchronize(s))
				}
			}
			eager := func(n int) {
				for range n {
					note(step())
					note(cuda.StreamSynchronize(s))
				}
			}
			graph(16) // warm both paths up
			eager(16)
			b.ResetTimer()
			tGraph, tEager := pairbench.Alternate(b.N, 256, graph, eager)
			b.StopTimer()
			require.NoError(b, failed)
			n := float64(b.N)
			b.ReportMetric(float64(tGraph.Nanoseconds())/n, "graph-ns/step")
			b.ReportMetric(float64(tEager.Nanoseconds())/n, "eager-ns/step")
			b.ReportMetric(float64(tGraph)/float64(tEager), "graph/eager")
		})
	}
}
