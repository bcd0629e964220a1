//go:build gpu && cgo

package nccl

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/kernels"
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestGPUTwoRankPathMatchesNCCLAllReduce runs two ranks of the NCCL backend with the
// real bf16 add kernel on real GPUs: two devices, or one device with NCCL >= 2.30 and
// NCCL_MULTI_RANK_GPU_ENABLE=1. For each size and offset it sums random bf16 data through
// the two-rank path and through ncclAllReduce (the typed Communicator), and requires the
// same bits on both ranks and the Go reference's bits (kernels.AddBF16).
func TestGPUTwoRankPathMatchesNCCLAllReduce(t *testing.T) {
	dev := twoRankDevices(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(t, err)

	// Sizes in elements, offsets in elements from a 256-byte aligned allocation.
	cases := []struct{ n, off int }{{1, 0}, {7, 1}, {4096, 0}, {4097, 3}, {65537, 1}, {1 << 19, 0}}
	maxElems := 1<<19 + 8
	rng := rand.New(rand.NewPCG(5, 6))
	var in [2][]uint16
	for r := range 2 {
		in[r] = make([]uint16, maxElems)
		for i := range in[r] {
			in[r][i] = uint16(rng.Uint32())
		}
	}
	var results [2][][]byte // per case: the path's result
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { results[r], errs[r] = gpuTwoRank(ctx, id, r, dev[r], in[r], cases) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for i, c := range cases {
		want := append([]uint16(nil), in[0][c.off:c.off+c.n]...)
		require.NoError(t, kernels.AddBF16(want, in[1][c.off:c.off+c.n]))
		wantBytes := make([]byte, 2*c.n)
		for j, v := range want {
			binary.LittleEndian.PutUint16(wantBytes[2*j:], v)
		}
		for r := range 2 {
			require.Equal(t, wantBytes, results[r][i], "rank %d, %d elements at offset %d", r, c.n, c.off)
		}
	}
}

// twoRankDevices returns the devices of ranks 0 and 1, skipping tb when two ranks cannot
// run here: two GPUs, or one with NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL's
// src/init.cc refuses two ranks on one GPU otherwise).
func twoRankDevices(tb testing.TB) [2]int {
	tb.Helper()
	if err := cuda.Init(0); err != nil {
		tb.Skipf("no usable GPU: %v (run make libs; NCCLGO_LIBCUDA selects libcuda)", err)
	}
	var devices int32
	require.NoError(tb, cuda.DeviceGetCount(&devices))
	version, err := nccl.LoadedVersion()
	require.NoError(tb, err)
	if devices >= 2 {
		return [2]int{0, 1}
	}
	if version < 23000 || os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE") != "1" {
		tb.Skipf("two ranks need two GPUs, or NCCL >= 2.30 (have %d) with NCCL_MULTI_RANK_GPU_ENABLE=1", version)
	}
	return [2]int{0, 0}
}

// BenchmarkGPUTwoRankPathVsNCCL finds the two-rank path's crossover: for each size from
// 4 KiB to 64 MiB it times Backend.AllReduce through the path (threshold raised to 64 MiB)
// against ncclAllReduce through the typed Communicator plus Sync, alternately in one run,
// on two ranks driven by one goroutine each. "path/nccl" below 1 means the path is
// faster; comm.DefaultTwoRankThreshold (1 MiB) should be about the largest size where it
// is (the GPU bundle's record judges it).
func BenchmarkGPUTwoRankPathVsNCCL(b *testing.B) {
	dev := twoRankDevices(b)
	const maxBytes = 64 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id, err := NewUniqueID()
	require.NoError(b, err)
	type job struct {
		path         bool
		bytes, count int
		done         chan error
	}
	var jobs [2]chan job
	ready := make(chan error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		jobs[r] = make(chan job)
		wg.Go(func() {
			err := benchRank(ctx, id, r, dev[r], maxBytes, func(path func(bytes int) error, ref func(bytes int) error) {
				ready <- nil
				for j := range jobs[r] {
					var err error
					for range j.count {
						if j.path {
							err = path(j.bytes)
						} else {
							err = ref(j.bytes)
						}
						if err != nil {
							break
						}
					}
					j.done <- err
				}
			})
			if err != nil {
				cancel() // the peer waits in NewNCCL until ctx ends
				ready <- fmt.Errorf("rank %d: %w", r, err)
				for j := range jobs[r] {
					j.done <- err
				}
			}
		})
	}
	defer func() {
		for r := range 2 {
			close(jobs[r])
		}
		wg.Wait()
	}()
	for range 2 {
		require.NoError(b, <-ready, "setting up two ranks")
	}
	var failed error
	both := func(path bool, bytes int) func(n int) {
		return func(n int) {
			done := make(chan error, 2)
			for r := range 2 {
				jobs[r] <- job{path: path, bytes: bytes, count: n, done: done}
			}
			for range 2 {
				if err := <-done; err != nil && failed == nil {
					failed = err
				}
			}
		}
	}
	for bytes := 4 << 10; bytes <= maxBytes; bytes *= 2 {
		b.Run(fmt.Sprintf("%dB", bytes), func(b *testing.B) {
			b.SetBytes(int64(bytes))
			both(true, bytes)(2) // warm up: scratch growth, first launches
			both(false, bytes)(2)
			require.NoError(b, failed)
			b.ResetTimer()
			tPath, tNCCL := pairbench.Alternate(b.N, 8, both(true, bytes), both(false, bytes))
			b.StopTimer()
			require.NoError(b, failed)
			n := float64(b.N)
			b.ReportMetric(float64(tPath.Nanoseconds())/n, "path-ns/op")
			b.ReportMetric(float64(tNCCL.Nanoseconds())/n, "nccl-ns/op")
			b.ReportMetric(float64(tPath)/float64(tNCCL), "path/nccl")
		})
	}
}

// benchRank is one rank of BenchmarkGPUTwoRankPathVsNCCL: it sets up the backend, the
// add kernel and two buffers of maxBytes on its locked OS thread, then calls serve with
// the two operations until serve returns; it returns the setup's error, if any.
func benchRank(ctx context.Context, id comm.UniqueID, rank, device, maxBytes int, serve func(path, ref func(bytes int) error)) error {
	b, err := New(ctx, id, rank, 2, bf16, WithDevice(device), WithTimeout(time.Minute), WithTwoRankThreshold(maxBytes))
	if err != nil {
		return err
	}
	defer b.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.c.d.SetDevice(); err != nil {
		return err
	}
	mod, err := kernels.Load()
	if err != nil {
		return err
	}
	defer mod.Close()
	f, err := mod.Func(kernels.BF16)
	if err != nil {
		return err
	}
	if err := b.SetAddKernel(comm.Kernel(f)); err != nil {
		return err
	}
	var bufs [2]comm.DevicePtr
	for i := range bufs {
		p, err := b.c.d.MemAlloc(uint64(maxBytes))
		if err != nil {
			return err
		}
		defer b.c.d.MemFree(p)
		if err := cudatest.Fill(cuda.Deviceptr(p), 0, maxBytes); err != nil {
			return err
		}
		bufs[i] = comm.DevicePtr(p)
	}
	serve(func(bytes int) error { return b.AllReduce(bufs[0], bytes) },
		func(bytes int) error {
			if err := b.Communicator().AllReduce(bufs[1], bytes/2, comm.BFloat16, comm.Sum); err != nil {
				return err
			}
			return b.Communicator().Sync(ctx)
		})
	return nil
}

// gpuTwoRank is one rank of TestGPUTwoRankPathMatchesNCCLAllReduce: it returns the
// two-rank path's result per case, after checking it against ncclAllReduce's.
func gpuTwoRank(ctx context.Context, id comm.UniqueID, rank, device int, in []uint16, cases []struct{ n, off int }) ([][]byte, error) {
	b, err := New(ctx, id, rank, 2, bf16, WithDevice(device), WithTimeout(time.Minute))
	if err != nil {
		return nil, err
	}
	defer b.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.c.d.SetDevice(); err != nil {
		return nil, err
	}
	mod, err := kernels.Load()
	if err != nil {
		return nil, err
	}
	defer mod.Close()
	f, err := mod.Func(kernels.BF16)
	if err != nil {
		return nil, err
	}
	if err := b.SetAddKernel(comm.Kernel(f)); err != nil {
		return nil, err
	}
	bytes := 2 * len(in)
	path, err := b.c.d.MemAlloc(uint64(bytes))
	if err != nil {
		return nil, err
	}
	defer b.c.d.MemFree(path)
	ref, err := b.c.d.MemAlloc(uint64(bytes))
	if err != nil {
		return nil, err
	}
	defer b.c.d.MemFree(ref)
	var out [][]byte
	for _, c := range cases {
		src := in[c.off : c.off+c.n]
		n := 2 * c.n
		p, q := comm.DevicePtr(path)+comm.DevicePtr(2*c.off), comm.DevicePtr(ref)+comm.DevicePtr(2*c.off)
		for _, dst := range []comm.DevicePtr{p, q} {
			if err := cudatest.Upload(cuda.Deviceptr(dst), src); err != nil {
				return nil, err
			}
		}
		if err := b.AllReduce(p, n); err != nil {
			return nil, fmt.Errorf("two-rank path, %d elements: %w", c.n, err)
		}
		if err := b.Communicator().AllReduce(q, c.n, comm.BFloat16, comm.Sum); err != nil {
			return nil, err
		}
		if err := b.Communicator().Sync(ctx); err != nil {
			return nil, err
		}
		got, want := make([]byte, n), make([]byte, n)
		if err := cudatest.Download(got, cuda.Deviceptr(p)); err != nil {
			return nil, err
		}
		if err := cudatest.Download(want, cuda.Deviceptr(q)); err != nil {
			return nil, err
		}
		if string(got) != string(want) {
			return nil, fmt.Errorf("%d elements at offset %d: the two-rank path differs from ncclAllReduce", c.n, c.off)
		}
		out = append(out, got)
	}
	return out, nil
}
