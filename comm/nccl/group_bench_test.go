//go:build cgo

package nccl

import (
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/comm/internal/rawdriver"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// groupCalls is the driver of BenchmarkGroupVsRaw: a group is recorded into
// rawdriver's Batch (straight into the nccl.Batch array that one cgo crossing runs) as
// its operations are made, with the communicator and stream of every call nulled so
// that NCCL rejects each call at once (there is no GPU), and submitted to the real
// libnccl. The rejection stands in for success: Submit drops it, as realCalls does.
// Every other call answers from stubDriver.
type groupCalls struct {
	stubDriver
}

func (groupCalls) NewBatch() gpulib.Batch { return nullBatch{new(rawdriver.Batch)} }

// nullBatch is groupCalls' Batch.
type nullBatch struct {
	*rawdriver.Batch
}

func (b nullBatch) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, _ gpulib.Comm, _ gpulib.Stream) error {
	return b.Batch.Send(buf, count, dt, peer, 0, 0)
}

func (b nullBatch) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, _ gpulib.Comm, _ gpulib.Stream) error {
	return b.Batch.Recv(buf, count, dt, peer, 0, 0)
}

func (nullBatch) Accepts(d gpulib.Driver) bool {
	_, ok := d.(groupCalls)
	return ok
}

func (b nullBatch) Submit() (int, error) {
	_ = b.Run()
	return b.Len(), nil
}

// rawP2PGroup is the same group of n sends and receives as raw calls, one crossing each.
func rawP2PGroup(n int) {
	_ = nccl.GroupStart()
	for i := range n {
		if i%2 == 0 {
			_ = nccl.Send(nil, 8, nccl.Uint8, 1, 0, 0)
		} else {
			_ = nccl.Recv(nil, 8, nccl.Uint8, 1, 0, 0)
		}
	}
	_ = nccl.GroupEnd()
}

// commP2PGroup is a group of n sends and receives to and from rank 1 through the NCCL
// backend.
func commP2PGroup(nb *Backend, n int) {
	_ = nb.GroupStart()
	for i := range n {
		if i%2 == 0 {
			_ = nb.SendTo(p, 8, 1, 3)
		} else {
			_ = nb.RecvFrom(p, 8, 1, 3)
		}
	}
	_ = nb.GroupEnd()
}

// commP2PGroupValue is commP2PGroup through a Group value (kept warm): one Add, then
// Submit.
func commP2PGroupValue(g *Group, nb *Backend, n int) {
	_ = g.Add(func() error {
		for i := range n {
			if i%2 == 0 {
				_ = nb.SendTo(p, 8, 1, 3)
			} else {
				_ = nb.RecvFrom(p, 8, 1, 3)
			}
		}
		return nil
	})
	_ = g.Submit()
}

// alternate3 runs fs in blocks of block calls until each has run n times, rotating
// which goes first, and returns each block's time per call, by function: on a loaded
// machine the medians of these, and of per-block ratios, are what one run can trust.
func alternate3(n, block int, fs [3]func(n int)) (per [3][]float64) {
	for done, i := 0, 0; done < n; done, i = done+block, i+1 {
		m := min(block, n-done)
		for k := range 3 {
			j := (i + k) % 3
			t0 := time.Now()
			fs[j](m)
			per[j] = append(per[j], float64(time.Since(t0).Nanoseconds())/float64(m))
		}
	}
	return per
}

// median returns the median of v (0 for none); v is reordered.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// BenchmarkGroupVsRaw measures a group of ops point-to-point operations (alternating
// SendTo and RecvFrom, 8 bytes, rank 1) through the NCCL backend, with the real
// libnccl 2.29.7 loaded and every call rejected at once by NCCL (null communicator),
// against, in the same run, alternating in blocks:
//   - raw: the same group as raw calls, ncclGroupStart + ops calls + ncclGroupEnd, one
//     cgo crossing each (raw-ns/op is per operation; raw-call-ns is one raw call, the
//     group's time over ops+2);
//   - floor: the same group already recorded in an nccl.Batch and run again: NCCL's own
//     work for the ops+2 calls (its rejection formats its last-error text) and one
//     crossing, the least any Go submission of the group can cost (raw/nccl's
//     BenchmarkBatchGroup vs-c puts a batch's run at the C loop of cbench.Group).
//
// Per operation means the whole group's time (GroupStart to GroupEnd) divided by ops;
// every figure is the median over blocks of 64 groups, each path timed in every block.
// comm-ns/op and raw-ns/op include NCCL's rejection work; above-floor-ns/op is comm's
// minus the floor's in the same block, the cost that is comm's and Go's, and
// above-floor/raw-call is that over one raw call of the same block (the target: at
// most 0.25 for ops >= 8). comm-allocs/op is per operation.
func BenchmarkGroupVsRaw(b *testing.B) {
	libcache.Load(b)
	for _, ops := range []int{1, 8, 64, 128} {
		b.Run("ops="+strconv.Itoa(ops), func(b *testing.B) {
			// NCCL keeps group state per thread: the raw group and the floor need one.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			nb := newStubNCCL(b, groupCalls{})
			commGroup := func() { commP2PGroup(nb, ops) }
			var floor nccl.Batch
			_ = floor.GroupStart()
			for i := range ops {
				if i%2 == 0 {
					_ = floor.Send(nil, 8, nccl.Uint8, 1, 0, 0)
				} else {
					_ = floor.Recv(nil, 8, nccl.Uint8, 1, 0, 0)
				}
			}
			if err := floor.GroupEnd(); err != nil {
				b.Fatal(err)
			}
			commGroup()
			allocs := testing.AllocsPerRun(100, commGroup)
			b.ResetTimer()
			per := alternate3(b.N, 64, [3]func(int){
				pairbench.Repeat(commGroup),
				pairbench.Repeat(func() { rawP2PGroup(ops) }),
				pairbench.Repeat(func() { _ = floor.Run() }),
			})
			b.StopTimer()
			k, nc := float64(ops), float64(ops+2)
			above, ratio := make([]float64, len(per[0])), make([]float64, len(per[0]))
			for i := range per[0] {
				above[i] = (per[0][i] - per[2][i]) / k
				ratio[i] = above[i] / (per[1][i] / nc)
			}
			rawCall := median(slices.Clone(per[1])) / nc
			comm, raw := median(slices.Clone(per[0])), median(slices.Clone(per[1]))
			b.ReportMetric(comm/k, "comm-ns/op")
			b.ReportMetric(raw/k, "raw-ns/op")
			b.ReportMetric(median(per[2])/k, "floor-ns/op")
			b.ReportMetric(rawCall, "raw-call-ns")
			b.ReportMetric(comm/raw, "comm/raw")
			b.ReportMetric(median(above), "above-floor-ns/op")
			b.ReportMetric(median(ratio), "above-floor/raw-call")
			b.ReportMetric(allocs/float64(ops), "comm-allocs/op")
		})
	}
}

// BenchmarkGroupOverhead is comm's own cost of grouped operations: a group of ops
// point-to-point operations over a driver that does nothing, per operation.
func BenchmarkGroupOverhead(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	nb := newStubNCCL(b, stubDriver{})
	for _, ops := range []int{1, 8, 64} {
		b.Run("ops="+strconv.Itoa(ops), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				commP2PGroup(nb, ops)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ops), "ns/grouped-op")
		})
	}
}

// BenchmarkGroupValueVsRaw is BenchmarkGroupVsRaw's comparison for a warm Group value (one
// Add, Submit) and for GroupStart/GroupEnd, against the same raw calls, alternating
// in the same run: value/start is the Group value's time over GroupStart/GroupEnd's.
func BenchmarkGroupValueVsRaw(b *testing.B) {
	libcache.Load(b)
	for _, ops := range []int{1, 8, 64} {
		b.Run("ops="+strconv.Itoa(ops), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			nb := newStubNCCL(b, groupCalls{})
			g := NewGroup()
			value := func() { commP2PGroupValue(g, nb, ops) }
			start := func() { commP2PGroup(nb, ops) }
			value()
			allocs := testing.AllocsPerRun(100, value)
			b.ResetTimer()
			per := alternate3(b.N, 64, [3]func(int){
				pairbench.Repeat(value),
				pairbench.Repeat(start),
				pairbench.Repeat(func() { rawP2PGroup(ops) }),
			})
			b.StopTimer()
			v, st, raw := median(slices.Clone(per[0])), median(slices.Clone(per[1])), median(slices.Clone(per[2]))
			b.ReportMetric(v/raw, "value/raw")
			b.ReportMetric(st/raw, "start/raw")
			b.ReportMetric(v/st, "value/start")
			b.ReportMetric(allocs, "value-allocs/submit")
		})
	}
}
