package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// TestTensorParallelAllReduceInsidePipelineGroup is the engine pattern of two backends
// on one rank: a pipeline-parallel group opened on the world's backend around a
// tensor-parallel all-reduce on a pair's backend (a Split), with the add kernel set so
// that the pair would take the two-rank send/recv + add path. NCCL keeps group state
// per thread, so the all-reduce is deferred to the outer GroupEnd: it must not return
// before its result exists, and the add kernel must not run before the deferred
// exchange (the grouped all-reduce takes ncclAllReduce). Afterwards, outside any group,
// the pair's two-rank path gives the same result.
func TestTensorParallelAllReduceInsidePipelineGroup(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32),
				nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			tp, err := c.SplitBackends(ctx, func(r int) int { return r / 2 })
			require.NoError(t, err)
			defer func() {
				for _, b := range tp {
					require.NoError(t, b.Close())
				}
			}()
			for r := range n {
				k, err := c.AddKernel(r, comm.Float32)
				require.NoError(t, err)
				require.NoError(t, tp[r].SetAddKernel(k))
			}
			const count = 64
			bufs := make([]comm.DevicePtr, n)
			for r := range n {
				bufs[r], err = c.Alloc(r, 4*count)
				require.NoError(t, err)
			}
			pp := c.Backends()
			for round, grouped := range []bool{true, false} {
				for r := range n {
					v := make([]float64, count)
					for i := range v {
						v[i] = float64(r*1000 + i + round)
					}
					data, err := commtest.EncodeValues(comm.Float32, v)
					require.NoError(t, err)
					require.NoError(t, c.Write(r, bufs[r], data))
				}
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r := range n {
					wg.Go(func() {
						if !grouped {
							errs[r] = tp[r].AllReduce(bufs[r], 4*count)
							return
						}
						if err := pp[r].GroupStart(); err != nil {
							errs[r] = err
							return
						}
						errs[r] = errors.Join(tp[r].AllReduce(bufs[r], 4*count), pp[r].GroupEnd())
					})
				}
				wg.Wait()
				for r := range n {
					require.NoError(t, errs[r], "rank %d (grouped %v)", r, grouped)
					got, err := c.Read(r, bufs[r], 4*count)
					require.NoError(t, err)
					vals, err := commtest.DecodeValues(comm.Float32, got)
					require.NoError(t, err)
					peer := r ^ 1
					for i, x := range vals {
						require.Equal(t, float64(r*1000+peer*1000+2*(i+round)), x,
							"rank %d element %d (grouped %v): the all-reduce returned before its result", r, i, grouped)
					}
				}
			}
		})
	}
}
