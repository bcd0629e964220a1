package commtest_test

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// TestCollectiveCheckMismatch: with the NCCL backend's collective check on (the option,
// or PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL), a collective whose last rank differs in
// count, operation, root, element type or reduction fails on every rank with a
// *comm.MismatchError naming both calls, on 2 and 4 simulated ranks; a matching
// collective after them completes; the Backend's AllReduce is checked too. Without the
// check the simulator fails the communicators asynchronously with ncclInvalidUsage
// (real NCCL hangs), not with a MismatchError.
func TestCollectiveCheckMismatch(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, by := range []string{"option", "env"} {
			t.Run(strconv.Itoa(n)+"-ranks-"+by, func(t *testing.T) {
				opts := []nccl.Option{nccl.WithTimeout(30 * time.Second), nccl.WithCloseTimeout(time.Second), nccl.WithLogger(quietLog)}
				if by == "option" {
					opts = append(opts, nccl.WithCollectiveCheck(true))
				} else {
					t.Setenv("NCCLGO_COLL_CHECK", "")
					t.Setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
				}
				c := newCluster(t, n, commtest.WithCommOptions(opts...))
				collectiveCheckCases(t, c)
			})
		}
	}
}

func collectiveCheckCases(t *testing.T, c *commtest.Cluster) {
	n := c.Size()
	cs := c.Communicators()
	bufs := make([][2]comm.DevicePtr, n)
	for r := range n {
		p, err := c.Alloc(r, 4*2048)
		require.NoError(t, err)
		q, err := c.Alloc(r, 4*64*n)
		require.NoError(t, err)
		bufs[r] = [2]comm.DevicePtr{p, q}
	}
	pick := func(r, a, b int) int {
		if r == n-1 {
			return b
		}
		return a
	}
	cases := []struct {
		name string
		call func(r int, x comm.Communicator, p, q comm.DevicePtr) error
		a, b string
	}{
		{"count", func(r int, x comm.Communicator, p, _ comm.DevicePtr) error {
			return x.AllReduce(p, pick(r, 1024, 512), comm.Float32, comm.Sum)
		}, "all-reduce #1 (count 1024, float32, sum)", "all-reduce #1 (count 512, float32, sum)"},
		{"op", func(r int, x comm.Communicator, p, _ comm.DevicePtr) error {
			if r == n-1 {
				return x.Broadcast(p, 1024, comm.Float32, 0)
			}
			return x.AllReduce(p, 1024, comm.Float32, comm.Sum)
		}, "all-reduce #2 (count 1024, float32, sum)", "broadcast #2 (count 1024, float32, root 0)"},
		{"root", func(r int, x comm.Communicator, p, _ comm.DevicePtr) error {
			return x.Broadcast(p, 256, comm.Float32, pick(r, 0, 1))
		}, "broadcast #3 (count 256, float32, root 0)", "broadcast #3 (count 256, float32, root 1)"},
		{"type", func(r int, x comm.Communicator, p, q comm.DevicePtr) error {
			return x.AllGather(p, q, 64, comm.DType(pick(r, int(comm.Float32), int(comm.Int32))))
		}, "all-gather #4 (count 64, float32)", "all-gather #4 (count 64, int32)"},
		{"reduction", func(r int, x comm.Communicator, p, _ comm.DevicePtr) error {
			return x.AllReduce(p, 8, comm.Float32, comm.ReduceOp(pick(r, int(comm.Sum), int(comm.Max))))
		}, "all-reduce #5 (count 8, float32, sum)", "all-reduce #5 (count 8, float32, max)"},
	}
	onComms := func(f func(r int, x comm.Communicator) error) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, x := range cs {
			wg.Go(func() {
				if errs[r] = f(r, x); errs[r] == nil {
					errs[r] = x.Sync(t.Context())
				}
			})
		}
		wg.Wait()
		return errs
	}
	for _, tc := range cases {
		errs := onComms(func(r int, x comm.Communicator) error { return tc.call(r, x, bufs[r][0], bufs[r][1]) })
		for r, err := range errs {
			require.Error(t, err, "%s mismatch: rank %d", tc.name, r)
			assert.ErrorIs(t, err, comm.ErrMismatch, "%s: rank %d", tc.name, r)
			var me *comm.MismatchError
			require.True(t, errors.As(err, &me), "%s: rank %d: %v", tc.name, r, err)
			assert.Equal(t, 0, me.Rank, tc.name)
			assert.Equal(t, n-1, me.OtherRank, tc.name)
			assert.Equal(t, []int{n - 1}, me.Ranks, tc.name)
			assert.Equal(t, tc.a, me.A.String(), tc.name)
			assert.Equal(t, tc.b, me.B.String(), tc.name)
			assert.Contains(t, err.Error(), tc.a)
			assert.Contains(t, err.Error(), tc.b)
		}
	}
	bs := c.Backends()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() { errs[r] = b.AllReduce(bufs[r][0], 2*pick(r, 512, 256)) })
	}
	wg.Wait()
	for r, err := range errs {
		var me *comm.MismatchError
		require.True(t, errors.As(err, &me), "backend all-reduce: rank %d: %v", r, err)
		assert.Equal(t, "all-reduce #6 (count 512, bfloat16, sum)", me.A.String())
		assert.Equal(t, "all-reduce #6 (count 256, bfloat16, sum)", me.B.String())
	}
	for r := range n {
		require.NoError(t, c.WriteValues(r, bufs[r][0], comm.Float32, []float64{1, 1, 1, 1}))
	}
	for r, err := range onComms(func(r int, x comm.Communicator) error { return x.AllReduce(bufs[r][0], 4, comm.Float32, comm.Sum) }) {
		require.NoError(t, err, "a matching collective after the mismatches, rank %d", r)
	}
	got, err := c.ReadValues(0, bufs[0][0], comm.Float32, 4)
	require.NoError(t, err)
	assert.Equal(t, []float64{float64(n), float64(n), float64(n), float64(n)}, got)
}

// BenchmarkCollectiveCheckCost is the collective check's cost on the simulator (Go
// layers and the simulator only, not a GPU figure): a blocking 4 KiB AllReduce on 2
// ranks through the Backend, on a cluster with the check on and one with it off,
// alternating in blocks of 16 in the same run. on/off is the ratio, on-minus-off-ns/op
// the check's cost per collective.
func BenchmarkCollectiveCheckCost(b *testing.B) {
	const n, bytes, block = 2, 4 << 10, 16
	mk := func(on bool) ([]comm.Backend, []comm.DevicePtr) {
		c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithCollectiveCheck(on)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		ps := make([]comm.DevicePtr, n)
		for r := range n {
			if ps[r], err = c.Alloc(r, bytes); err != nil {
				b.Fatal(err)
			}
		}
		return c.Backends(), ps
	}
	run := func(bs []comm.Backend, ps []comm.DevicePtr, k int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				for range k {
					if err := bs[r].AllReduce(ps[r], bytes); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	onB, onP := mk(true)
	offB, offP := mk(false)
	run(onB, onP, 1)
	run(offB, offP, 1)
	b.ReportAllocs()
	b.ResetTimer()
	var on, off time.Duration
	ops := 0
	for ops < b.N {
		k := min(block, b.N-ops)
		off += run(offB, offP, k)
		on += run(onB, onP, k)
		ops += k
	}
	onNs, offNs := float64(on.Nanoseconds())/float64(ops), float64(off.Nanoseconds())/float64(ops)
	b.ReportMetric(onNs, "on-ns/op")
	b.ReportMetric(offNs, "off-ns/op")
	b.ReportMetric(onNs-offNs, "on-minus-off-ns/op")
	b.ReportMetric(onNs/offNs, "on/off")
}

// TestCollectiveCheckInGroup: with the check on, a collective inside a group is checked
// when it is queued: the mismatched call fails on every rank with a MismatchError and
// is not queued, and GroupEnd launches the matching calls, on 2 and 4 simulated ranks.
func TestCollectiveCheckInGroup(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(strconv.Itoa(n)+"-ranks", func(t *testing.T) {
			c := newCluster(t, n, commtest.WithCommOptions(nccl.WithCollectiveCheck(true),
				nccl.WithTimeout(30*time.Second), nccl.WithCloseTimeout(time.Second), nccl.WithLogger(quietLog)))
			cs := c.Communicators()
			ps := make([]comm.DevicePtr, n)
			for r := range n {
				p, err := c.Alloc(r, 4*64)
				require.NoError(t, err)
				require.NoError(t, c.WriteValues(r, p, comm.Float32, []float64{1, 1, 1, 1, 2, 2, 2, 2}))
				ps[r] = p
			}
			mismatch := make([]error, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, x := range cs {
				wg.Go(func() {
					if errs[r] = x.GroupStart(); errs[r] != nil {
						return
					}
					count := 8
					if r == n-1 {
						count = 6
					}
					mismatch[r] = x.AllReduce(ps[r], count, comm.Float32, comm.Sum)
					errs[r] = errors.Join(x.AllReduce(ps[r], 4, comm.Float32, comm.Sum), x.GroupEnd())
					if errs[r] == nil {
						errs[r] = x.Sync(t.Context())
					}
				})
			}
			wg.Wait()
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
				var me *comm.MismatchError
				require.True(t, errors.As(mismatch[r], &me), "rank %d: %v", r, mismatch[r])
				assert.Equal(t, "all-reduce #1 (count 8, float32, sum)", me.A.String())
				assert.Equal(t, "all-reduce #1 (count 6, float32, sum)", me.B.String())
				got, err := c.ReadValues(r, ps[r], comm.Float32, 8)
				require.NoError(t, err)
				f := float64(n)
				assert.Equal(t, []float64{f, f, f, f, 2, 2, 2, 2}, got, "rank %d: only the matching call ran", r)
			}
		})
	}
}
