package commtest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// Tests of the NCCL backend's two-rank send/recv + add all-reduce path on the
// simulator. The reference is the same cluster's ncclAllReduce: the typed
// Communicator's AllReduce always calls it.

// addKernelTypes are the element types package kernels has an add kernel for.
var addKernelTypes = []comm.DType{comm.BFloat16, comm.Float16, comm.Float32}

// twoRankCluster starts a 2-rank cluster of element type elem whose backends have the
// add kernel of that type.
func twoRankCluster(t testing.TB, elem comm.DType, opts ...nccl.Option) (*commtest.Cluster, []*nccl.Backend) {
	t.Helper()
	return clusterWithKernel(t, elem, elem, opts...)
}

// clusterWithKernel starts a 2-rank cluster of element type elem whose backends have
// the add kernel of type kernel.
func clusterWithKernel(t testing.TB, elem, kernel comm.DType, opts ...nccl.Option) (*commtest.Cluster, []*nccl.Backend) {
	t.Helper()
	c, err := commtest.NewCluster(2, commtest.WithCommOptions(append([]nccl.Option{nccl.WithElementType(elem)}, opts...)...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	bs := make([]*nccl.Backend, 2)
	for r := range 2 {
		bs[r], err = c.NCCL(r)
		require.NoError(t, err)
		k, err := c.AddKernel(r, kernel)
		require.NoError(t, err)
		require.NoError(t, bs[r].SetAddKernel(k))
	}
	return c, bs
}

// onBoth runs f on both ranks concurrently (the exchange needs both) and returns the
// errors.
func onBoth(f func(rank int) error) [2]error {
	var errs [2]error
	var wg sync.WaitGroup
	wg.Go(func() { errs[1] = f(1) })
	errs[0] = f(0)
	wg.Wait()
	return errs
}

func requireBoth(t testing.TB, f func(rank int) error, format string, args ...any) {
	t.Helper()
	for r, err := range onBoth(f) {
		if err != nil {
			t.Fatalf("rank %d: %s: %v", r, fmt.Sprintf(format, args...), err)
		}
	}
}

// randomElems returns n elements of t as bytes: random bit patterns (every NaN,
// infinity, signed zero and subnormal of the 16-bit types occurs), with a share of
// special values and, for float32, of small integers whose sums are exact.
func randomElems(rng *rand.Rand, t comm.DType, n int) []byte {
	es := t.Size()
	b := make([]byte, n*es)
	for i := range n {
		if es == 2 {
			v := uint16(rng.Uint32())
			switch rng.IntN(16) {
			case 0:
				v = []uint16{0x0000, 0x8000, 0x7fff, 0xffff, 0x0001, 0x8001}[rng.IntN(6)]
			case 1:
				if t == comm.BFloat16 {
					v = []uint16{0x7f80, 0xff80, 0x7f7f, 0xff7f, 0x0080, 0x007f}[rng.IntN(6)]
				} else {
					v = []uint16{0x7c00, 0xfc00, 0x7bff, 0xfbff, 0x0400, 0x03ff}[rng.IntN(6)]
				}
			}
			binary.LittleEndian.PutUint16(b[2*i:], v)
			continue
		}
		v := rng.Uint32()
		switch rng.IntN(16) {
		case 0:
			v = []uint32{0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00001, 0x00000001, 0x7f7fffff}[rng.IntN(7)]
		case 1, 2, 3:
			v = math.Float32bits(float32(rng.IntN(2001) - 1000))
		}
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// sweepCounts is the sizes, in elements, that the bit-for-bit test covers: every size
// from 0 to dense, then each power of two up to max elements with its neighbours.
func sweepCounts(dense, max int) []int {
	var out []int
	for n := 0; n <= dense; n++ {
		out = append(out, n)
	}
	p := 1
	for p <= dense {
		p *= 2
	}
	for ; p <= max; p *= 2 {
		out = append(out, p-1, p, p+1)
	}
	return out
}

// TestTwoRankPathMatchesNCCLAllReduceBitForBit sums random data (NaNs, infinities,
// signed zeros, subnormals included) of every size from 0 to 4096 elements and of
// powers of two and their odd neighbours up to 4 MiB, at element offsets that are not
// 16-byte aligned, through the two-rank path and through ncclAllReduce on the same
// cluster, and requires identical bits on both ranks and untouched neighbours. With
// -short or -race the sweep stops at 512 elements and 256 KiB.
func TestTwoRankPathMatchesNCCLAllReduceBitForBit(t *testing.T) {
	for _, elem := range addKernelTypes {
		t.Run(elem.String(), func(t *testing.T) {
			es := elem.Size()
			maxBytes, dense := 4<<20, 4096
			if twoRankRace || testing.Short() {
				maxBytes, dense = 256<<10, 512
			}
			counts := sweepCounts(dense, maxBytes/es)
			c, bs := twoRankCluster(t, elem, nccl.WithTwoRankThreshold(maxBytes+es))
			comms := c.Communicators()
			offsets := []int{0, 1, 3, 7, 5, 2}        // in elements: 16-byte misaligned for all but 0
			span := (counts[len(counts)-1] + 16) * es // largest count plus offset and a guard element
			rng := rand.New(rand.NewPCG(1, uint64(elem)))
			var in [2][]byte
			var path, ref [2]comm.DevicePtr
			for r := range 2 {
				in[r] = randomElems(rng, elem, span/es)
				var err error
				path[r], err = c.Alloc(r, span)
				require.NoError(t, err)
				ref[r], err = c.Alloc(r, span)
				require.NoError(t, err)
			}
			for i, n := range counts {
				off := offsets[i%len(offsets)] * es
				bytes := n * es
				window := bytes + es // the sum and a guard element after it
				for r := range 2 {
					require.NoError(t, c.Write(r, path[r], in[r][:off+window]))
					require.NoError(t, c.Write(r, ref[r], in[r][:off+window]))
				}
				requireBoth(t, func(r int) error { return bs[r].AllReduce(path[r]+comm.DevicePtr(off), bytes) },
					"two-rank all-reduce of %d elements at offset %d", n, off)
				requireBoth(t, func(r int) error {
					if err := comms[r].AllReduce(ref[r]+comm.DevicePtr(off), n, elem, comm.Sum); err != nil {
						return err
					}
					return comms[r].Sync(context.Background())
				}, "ncclAllReduce of %d elements at offset %d", n, off)
				var got [2][]byte
				for r := range 2 {
					var err error
					got[r], err = c.Read(r, path[r], off+window)
					require.NoError(t, err)
					want, err := c.Read(r, ref[r], off+window)
					require.NoError(t, err)
					require.Equal(t, want, got[r], "rank %d, %d elements at offset %d: two-rank path differs from ncclAllReduce", r, n, off)
					require.Equal(t, in[r][:off], got[r][:off], "rank %d: bytes before the buffer changed", r)
					require.Equal(t, in[r][off+bytes:off+window], got[r][off+bytes:], "rank %d: bytes after the buffer changed", r)
				}
				require.Equal(t, got[0][off:off+bytes], got[1][off:off+bytes], "%d elements: ranks disagree", n)
			}
			for r := range 2 {
				u, err := c.Usage(r)
				require.NoError(t, err)
				require.Equal(t, 1, u.Registrations, "rank %d: the two-rank path registered its scratch buffer", r)
			}
		})
	}
}

// TestTwoRankPathSumsAreRoundedOnce checks hand-picked bf16 sums whose exact value lies
// between two bf16 values, on both ranks: ties round to even, and the order of the
// operands does not matter.
func TestTwoRankPathSumsAreRoundedOnce(t *testing.T) {
	tests := []struct {
		name       string
		a, b, want uint16
	}{
		{"exact", 0x3f80, 0x3f80, 0x4000},                    // 1 + 1 = 2
		{"tie rounds to even, down", 0x3f80, 0x3b80, 0x3f80}, // 1 + 2^-8 = 1 (tie, even)
		{"tie rounds to even, up", 0x3f81, 0x3b80, 0x3f82},   // (1+2^-7) + 2^-8: tie, up to even
		{"above the tie rounds up", 0x3f80, 0x3b81, 0x3f81},
		{"overflow to infinity", 0x7f7f, 0x7f7f, 0x7f80},
		{"signed zeros sum to +0", 0x8000, 0x0000, 0x0000},
		{"negative zeros stay -0", 0x8000, 0x8000, 0x8000},
		{"infinities of both signs give the canonical NaN", 0x7f80, 0xff80, 0x7fff},
		{"NaN payloads give the canonical NaN", 0x7fa1, 0x3f80, 0x7fff},
		{"subnormals are kept", 0x0001, 0x0001, 0x0002},
	}
	c, bs := twoRankCluster(t, comm.BFloat16)
	var p [2]comm.DevicePtr
	for r := range 2 {
		var err error
		p[r], err = c.Alloc(r, 2*len(tests))
		require.NoError(t, err)
		in := make([]byte, 2*len(tests))
		for i, tc := range tests {
			binary.LittleEndian.PutUint16(in[2*i:], []uint16{tc.a, tc.b}[r])
		}
		require.NoError(t, c.Write(r, p[r], in))
	}
	requireBoth(t, func(r int) error { return bs[r].AllReduce(p[r], 2*len(tests)) }, "all-reduce")
	for r := range 2 {
		out, err := c.Read(r, p[r], 2*len(tests))
		require.NoError(t, err)
		for i, tc := range tests {
			assert.Equal(t, fmt.Sprintf("%#04x", tc.want), fmt.Sprintf("%#04x", binary.LittleEndian.Uint16(out[2*i:])), "rank %d: %s", r, tc.name)
		}
	}
}

// TestTwoRankPathIsTakenOnlyWhereItApplies makes the add kernel's launch fail once on
// rank 0 and checks which all-reduces reach it: those with two ranks, an add kernel and
// 1 to threshold bytes, outside a group.
func TestTwoRankPathIsTakenOnlyWhereItApplies(t *testing.T) {
	const threshold = 1024
	tests := []struct {
		name    string
		elem    comm.DType
		kernel  comm.DType // the add kernel handed to SetAddKernel
		bytes   int
		group   bool
		async   bool
		takesIt bool
	}{
		{"bf16 at the threshold", comm.BFloat16, comm.BFloat16, threshold, false, false, true},
		{"bf16 one element", comm.BFloat16, comm.BFloat16, 2, false, false, true},
		{"fp16", comm.Float16, comm.Float16, 64, false, false, true},
		{"fp32", comm.Float32, comm.Float32, 64, false, false, true},
		{"async", comm.BFloat16, comm.BFloat16, 64, false, true, true},
		{"above the threshold", comm.BFloat16, comm.BFloat16, threshold + 2, false, false, false},
		{"zero bytes", comm.BFloat16, comm.BFloat16, 0, false, false, false},
		{"inside a group", comm.BFloat16, comm.BFloat16, 64, true, false, false},
		{"int32 has no add kernel", comm.Int32, comm.BFloat16, 64, false, false, false},
		{"float64 has no add kernel", comm.Float64, comm.Float32, 64, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, bs := clusterWithKernel(t, tc.elem, tc.kernel, nccl.WithTwoRankThreshold(threshold))
			var p [2]comm.DevicePtr
			for r := range 2 {
				var err error
				p[r], err = c.Alloc(r, threshold+16)
				require.NoError(t, err)
			}
			require.NoError(t, c.FailCall(0, "cuLaunchKernel", 1))
			errs := onBoth(func(r int) error {
				switch {
				case tc.group:
					if err := bs[r].GroupStart(); err != nil {
						return err
					}
					if err := bs[r].AllReduce(p[r], tc.bytes); err != nil {
						return err
					}
					return bs[r].GroupEnd()
				case tc.async:
					if err := bs[r].AllReduceAsync(p[r], tc.bytes, 0); err != nil {
						return err
					}
					return c.Synchronize(r)
				}
				return bs[r].AllReduce(p[r], tc.bytes)
			})
			require.NoError(t, errs[1])
			if !tc.takesIt {
				require.NoError(t, errs[0])
				return
			}
			require.ErrorIs(t, errs[0], commtest.ErrInjected)
			assert.Contains(t, errs[0].Error(), "two-rank add kernel")
		})
	}
}

// TestTwoRankPathScratchGrowsAndIsFreedOnClose checks the scratch buffer's life on
// the simulated device: one allocation and one registration at first use, none for
// calls that fit, a larger one replacing it when a call needs more, nothing left after
// Close.
func TestTwoRankPathScratchGrowsAndIsFreedOnClose(t *testing.T) {
	c, bs := twoRankCluster(t, comm.Float32)
	var p [2]comm.DevicePtr
	for r := range 2 {
		var err error
		p[r], err = c.Alloc(r, 1<<20)
		require.NoError(t, err)
	}
	before, err := c.Usage(0)
	require.NoError(t, err)
	steps := []struct {
		bytes     int
		wantBytes uint64 // scratch bytes in use after the call
	}{
		{4, 4096},        // the smallest scratch
		{4096, 4096},     // fits, offset 0
		{4096 + 4, 8192}, // grows to the next power of two
		{64, 8192},       // a smaller call keeps it
		{1 << 20, 1 << 20},
	}
	for _, st := range steps {
		requireBoth(t, func(r int) error { return bs[r].AllReduce(p[r], st.bytes) }, "all-reduce of %d bytes", st.bytes)
		u, err := c.Usage(0)
		require.NoError(t, err)
		assert.Equal(t, before.Allocations+1, u.Allocations, "after %d bytes: one scratch buffer", st.bytes)
		assert.Equal(t, before.Registrations+1, u.Registrations, "after %d bytes: the scratch buffer is registered", st.bytes)
		assert.Equal(t, before.Bytes+st.wantBytes, u.Bytes, "after %d bytes: scratch size", st.bytes)
	}
	requireBoth(t, func(r int) error { return bs[r].Close() }, "close")
	u, err := c.Usage(0)
	require.NoError(t, err)
	assert.Equal(t, before.Allocations-1, u.Allocations, "Close frees the scratch and the backend's own buffer")
	assert.Zero(t, u.Registrations)
}

// BenchmarkTwoRankPathVsNCCLAllReduce compares, on the simulator, a blocking 2-rank
// AllReduce through the two-rank path with one through ncclAllReduce (the baseline: a
// cluster whose threshold is 0), alternating the two in the same run; the metrics are
// per all-reduce and their ratio. SIMULATED: the figures measure comm's and the
// simulator's software layers (goroutines, host copies, the Go reference add), not a
// GPU or a network, and say nothing about the crossover on real hardware.
func BenchmarkTwoRankPathVsNCCLAllReduce(b *testing.B) {
	for _, elem := range []comm.DType{comm.BFloat16, comm.Float32} {
		for _, bytes := range []int{4 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("simulated/%v/bytes=%d", elem, bytes), func(b *testing.B) {
				allReduce := func(threshold int) func() {
					c, bs := twoRankCluster(b, elem, nccl.WithTwoRankThreshold(threshold))
					var p [2]comm.DevicePtr
					for r := range 2 {
						var err error
						p[r], err = c.Alloc(r, bytes)
						require.NoError(b, err)
					}
					return func() {
						if errs := onBoth(func(r int) error { return bs[r].AllReduce(p[r], bytes) }); errs[0] != nil || errs[1] != nil {
							b.Fatal(errs)
						}
					}
				}
				path, nccl := allReduce(nccl.DefaultTwoRankThreshold), allReduce(0)
				path()
				nccl()
				b.ReportAllocs() // both paths and the simulator, together
				b.ResetTimer()
				tp, tn := pairbench.Alternate(b.N, 16, pairbench.Repeat(path), pairbench.Repeat(nccl))
				n := float64(b.N) * 1e3
				b.ReportMetric(float64(tp)/n, "two-rank-us/op")
				b.ReportMetric(float64(tn)/n, "nccl-all-reduce-us/op")
				b.ReportMetric(float64(tp)/float64(tn), "two-rank/nccl-all-reduce")
			})
		}
	}
}

// Two ranks whose backends have the add kernel sum a bfloat16 buffer through the
// two-rank send/recv + add path (the simulated kernel computes like the real one).
func ExampleCluster_AddKernel() {
	cluster, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16)) // bfloat16 backends
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	inputs := [][]float64{{1, 0.1, 3}, {1, 0.2, -3}}
	bufs := make([]comm.DevicePtr, 2)
	for rank := range 2 {
		// The engine loads the kernel (kernels.Load, Module.Func(kernels.BF16)) and
		// hands it to its backend; the cluster gives the simulated device's handle.
		k, err := cluster.AddKernel(rank, comm.BFloat16)
		if err != nil {
			fmt.Println(err)
			return
		}
		b, err := cluster.Backend(rank)
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := b.SetAddKernel(k); err != nil {
			fmt.Println(err)
			return
		}
		if bufs[rank], err = cluster.Alloc(rank, 6); err != nil {
			fmt.Println(err)
			return
		}
		if err := cluster.WriteValues(rank, bufs[rank], comm.BFloat16, inputs[rank]); err != nil {
			fmt.Println(err)
			return
		}
	}
	var wg sync.WaitGroup
	for rank, b := range cluster.Backends() {
		wg.Go(func() {
			if err := b.AllReduce(bufs[rank], 6); err != nil { // 6 bytes <= the threshold: the path
				fmt.Println("rank", rank, err)
			}
		})
	}
	wg.Wait()
	for rank := range 2 {
		sum, err := cluster.ReadValues(rank, bufs[rank], comm.BFloat16, 3)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("rank", rank, sum)
	}
	// Output:
	// rank 0 [2 0.30078125 0]
	// rank 1 [2 0.30078125 0]
}
