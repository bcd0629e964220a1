package commtest_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestNCCLFailuresReachCallersTyped checks what an engine sees of NCCL's failures: the
// raw result matches with errors.Is, NCCL's own text is in the message with the
// operation and the rank (and the peer of a send), and from the first fatal error on
// every error also matches ErrUnhealthy. A mismatch between ranks reaches every rank
// with the simulator's account of it.
func TestNCCLFailuresReachCallersTyped(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			t.Run("async-error", func(t *testing.T) {
				c, err := commtest.NewCluster(n, commtest.WithCommOptions(comm.WithTimeout(time.Minute), comm.WithLogger(quietLog)))
				require.NoError(t, err)
				defer func() { _ = c.Close() }()
				b, err := c.Backend(1)
				require.NoError(t, err)
				p, err := c.Alloc(1, 64)
				require.NoError(t, err)
				require.NoError(t, c.InjectAsyncError(1, nccl.RemoteError))
				err = b.AllReduce(p, 64)
				require.Error(t, err)
				assert.ErrorIs(t, err, nccl.RemoteError, "the raw result")
				assert.ErrorIs(t, err, comm.ErrUnhealthy, "the first fatal error already says unhealthy")
				assert.Contains(t, err.Error(), "all-reduce of 64 bytes on rank 1")
				assert.Contains(t, err.Error(), "ncclRemoteError")
				err = b.SendTo(p, 8, 0, 0)
				assert.ErrorIs(t, err, comm.ErrUnhealthy)
				assert.ErrorIs(t, err, nccl.RemoteError, "later errors keep the cause")
				assert.Contains(t, err.Error(), "send of 8 bytes on rank 1 to rank 0")
				assert.False(t, b.IsHealthy())
			})
			t.Run("mismatch", func(t *testing.T) {
				c, err := commtest.NewCluster(n, commtest.WithCommOptions(comm.WithTimeout(time.Minute), comm.WithLogger(quietLog)))
				require.NoError(t, err)
				defer func() { _ = c.Close() }()
				bs := c.Backends()
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r := range n {
					p, err := c.Alloc(r, 64)
					require.NoError(t, err)
					size := 64
					if r == n-1 {
						size = 32
					}
					wg.Go(func() { errs[r] = bs[r].AllReduce(p, size) })
				}
				wg.Wait()
				for r, err := range errs {
					require.Error(t, err, "rank %d", r)
					assert.ErrorIs(t, err, nccl.InvalidUsage, "rank %d", r)
					assert.ErrorIs(t, err, comm.ErrUnhealthy, "rank %d", r)
					assert.Contains(t, err.Error(), fmt.Sprintf("on rank %d", r))
					assert.Contains(t, err.Error(), "does not match across ranks: rank 0 called ncclAllReduce(count 32", "rank %d: the simulator's account", r)
					assert.True(t, errors.Is(err, nccl.InvalidUsage))
				}
			})
		})
	}
}
