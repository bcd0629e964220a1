//go:build gpu

package kernels

// GPU checks of the add kernels (build tag gpu; run on a machine with an
// NVIDIA GPU of compute capability 8.0 or newer):
//
//	go test -tags gpu -run GPU -bench GPU -benchmem ./kernels
//
// They compare the kernels' output, bit for bit, with the Go reference
// (AddBF16, AddF16, AddF32) and measure the kernel's bandwidth against a
// device-to-device copy in the same run. Without a usable GPU they skip.

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// expand returns dst/src pairs: every 16-bit pattern against every edge
// value, in both operand orders.
func expand16(edges []uint16) (dst, src []uint16) {
	for p := range 1 << 16 {
		for _, e := range edges {
			dst = append(dst, uint16(p), e)
			src = append(src, e, uint16(p))
		}
	}
	return dst, src
}

func TestGPUAddMatchesReferenceOnEdgeValues(t *testing.T) {
	g := openGPU(t)
	t.Run("bf16", func(t *testing.T) {
		dst, src := expand16(edgeBF16)
		want := append([]uint16(nil), dst...)
		require.NoError(t, AddBF16(want, src))
		got := g.add16(t, BF16, dst, src)
		requireEqual16(t, "bf16", dst, src, want, got)
	})
	t.Run("fp16", func(t *testing.T) {
		dst, src := expand16(edgeF16)
		want := append([]uint16(nil), dst...)
		require.NoError(t, AddF16(want, src))
		got := g.add16(t, F16, dst, src)
		requireEqual16(t, "fp16", dst, src, want, got)
	})
	t.Run("fp32", func(t *testing.T) {
		var dst, src []float32
		rng := rand.New(rand.NewPCG(7, 8))
		for range 1 << 16 {
			r := rng.Uint32()
			for _, e := range edgeF32 {
				dst = append(dst, math.Float32frombits(r), math.Float32frombits(e))
				src = append(src, math.Float32frombits(e), math.Float32frombits(r))
			}
		}
		for _, a := range edgeF32 {
			for _, b := range edgeF32 {
				dst = append(dst, math.Float32frombits(a))
				src = append(src, math.Float32frombits(b))
			}
		}
		want := append([]float32(nil), dst...)
		require.NoError(t, AddF32(want, src))
		got := g.add32(t, dst, src)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				require.Failf(t, "fp32 kernel differs from the reference", "element %d: %#08x + %#08x: kernel %#08x, reference %#08x",
					i, math.Float32bits(dst[i]), math.Float32bits(src[i]), math.Float32bits(got[i]), math.Float32bits(want[i]))
			}
		}
	})
}

func requireEqual16(t *testing.T, kind string, dst, src, want, got []uint16) {
	t.Helper()
	require.Len(t, got, len(want))
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad < 10 {
				t.Errorf("%s element %d: %#04x + %#04x: kernel %#04x, reference %#04x", kind, i, dst[i], src[i], got[i], want[i])
			}
			bad++
		}
	}
	require.Zero(t, bad, "%s: %d of %d elements differ from the reference", kind, bad, len(want))
}

// TestGPUAddMatchesReferenceOn1GiBOfRandomBF16 adds 1 GiB of random bf16
// patterns (every pattern equally likely: NaNs, infinities and subnormals
// included) into another 1 GiB and compares with the reference.
func TestGPUAddMatchesReferenceOn1GiBOfRandomBF16(t *testing.T) {
	g := openGPU(t)
	const n = 1 << 29 // 1 GiB of bf16
	dst := make([]uint16, n)
	src := make([]uint16, n)
	parallel(n, func(lo, hi int) {
		rng := rand.New(rand.NewPCG(uint64(lo), 9))
		for i := lo; i < hi; i++ {
			r := rng.Uint32()
			dst[i], src[i] = uint16(r), uint16(r>>16)
		}
	})
	got := g.add16(t, BF16, dst, src)
	want := dst
	parallel(n, func(lo, hi int) { _ = AddBF16(want[lo:hi], src[lo:hi]) })
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad < 10 {
				t.Errorf("element %d: kernel %#04x, reference %#04x (src %#04x)", i, got[i], want[i], src[i])
			}
			bad++
		}
	}
	require.Zero(t, bad, "%d of %d elements differ", bad, n)
}

// TestGPUAddHandlesEveryAlignmentAndLength runs each kernel on sub-ranges
// of a buffer at every element offset of dst and src within 16 bytes and
// on lengths around the vector and block sizes, and checks that the range
// is the reference sum and that nothing outside it changed.
func TestGPUAddHandlesEveryAlignmentAndLength(t *testing.T) {
	g := openGPU(t)
	lengths := []int{0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 2047, 2048, 2049, 4097, 100_003}
	for _, k := range Kinds() {
		t.Run(k.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(10, uint64(k)))
			alignmentCases(t, k, lengths, rng, func(dst, src, want []byte, doff, soff, n int) bool {
				got := g.addBytes(t, k, dst, src, doff, soff, n)
				return assert.Equal(t, want, got, "dst offset %d, src offset %d, n %d", doff, soff, n)
			})
		})
	}
}

// parallel runs f over [0, n) split across the CPUs.
func parallel(n int, f func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	wg.Wait()
}

// BenchmarkGPUAddBF16VersusCopy measures the bf16 add kernel on 1 GiB
// buffers (2 reads + 1 write per element) and cuMemcpyDtoD of the same
// 1 GiB (1 read + 1 write) in the same run, and reports both bandwidths and
// their ratio (target: add at least 0.85 of copy).
func BenchmarkGPUAddBF16VersusCopy(b *testing.B) {
	g := openGPU(b)
	const bytes = 1 << 30
	dst := g.alloc(b, bytes)
	src := g.alloc(b, bytes)
	g.memset(b, dst, bytes)
	g.memset(b, src, bytes)
	const n = bytes / 2
	const reps = 20
	// Warm up: the driver loads a module's kernels lazily, on first launch.
	g.launch(b, BF16, dst, src, n)
	g.copyDtoD(b, dst, src, bytes)
	g.sync(b)
	var addSec, copySec float64
	for b.Loop() {
		addSec += g.timed(b, reps, func() { g.launch(b, BF16, dst, src, n) })
		copySec += g.timed(b, reps, func() { g.copyDtoD(b, dst, src, bytes) })
	}
	iters := float64(b.N * reps)
	addGBs := 3 * bytes * iters / addSec / 1e9
	copyGBs := 2 * bytes * iters / copySec / 1e9
	b.ReportMetric(addGBs, "add-GB/s")
	b.ReportMetric(copyGBs, "copy-GB/s")
	b.ReportMetric(addGBs/copyGBs, "add/copy")
	b.Logf("%s: bf16 add %.0f GB/s, cuMemcpyDtoD %.0f GB/s, ratio %.3f (target >= 0.85)", g.name, addGBs, copyGBs, addGBs/copyGBs)
}
