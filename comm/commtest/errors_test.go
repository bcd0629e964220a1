package commtest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
	rawnccl "github.com/ncclgo/ncclgo/raw/nccl"
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
				c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
				require.NoError(t, err)
				defer func() { _ = c.Close() }()
				b, err := c.Backend(1)
				require.NoError(t, err)
				p, err := c.Alloc(1, 64)
				require.NoError(t, err)
				require.NoError(t, c.InjectAsyncError(1, rawnccl.RemoteError))
				err = b.AllReduce(p, 64)
				require.Error(t, err)
				assert.ErrorIs(t, err, rawnccl.RemoteError, "the raw result")
				assert.ErrorIs(t, err, comm.ErrUnhealthy, "the first fatal error already says unhealthy")
				assert.Contains(t, err.Error(), "all-reduce of 64 bytes on rank 1")
				assert.Contains(t, err.Error(), "ncclRemoteError")
				err = b.SendTo(p, 8, 0, 0)
				assert.ErrorIs(t, err, comm.ErrUnhealthy)
				assert.ErrorIs(t, err, rawnccl.RemoteError, "later errors keep the cause")
				assert.Contains(t, err.Error(), "send of 8 bytes on rank 1 to rank 0")
				assert.False(t, b.IsHealthy())
			})
			t.Run("mismatch", func(t *testing.T) {
				c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
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
					assert.ErrorIs(t, err, rawnccl.InvalidUsage, "rank %d", r)
					assert.ErrorIs(t, err, comm.ErrUnhealthy, "rank %d", r)
					assert.Contains(t, err.Error(), fmt.Sprintf("on rank %d", r))
					assert.Contains(t, err.Error(), "does not match across ranks: rank 0 called ncclAllReduce(count 32", "rank %d: the simulator's account", r)
					assert.True(t, errors.Is(err, rawnccl.InvalidUsage))
				}
			})
		})
	}
}

// TestCloseSaysWhatItAbandoned: a send that no rank receives keeps ncclCommFinalize from
// completing; Close aborts after WithCloseTimeout and must say so instead of returning
// nil.
func TestCloseSaysWhatItAbandoned(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute),
				nccl.WithCloseTimeout(200*time.Millisecond), nccl.WithLogger(quietLog)))
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			b, err := c.Backend(0)
			require.NoError(t, err)
			p, err := c.Alloc(0, 64)
			require.NoError(t, err)
			s, err := c.NewStream(0)
			require.NoError(t, err)
			require.NoError(t, b.SendTo(p, 64, 1, s)) // never received
			err = b.Close()
			require.Error(t, err, "close aborted the communicator")
			assert.Contains(t, err.Error(), "did not complete within the close timeout 200ms and were abandoned")
			assert.Contains(t, err.Error(), "close on rank 0")
		})
	}
}

// TestSymmetricAllocIsLocalAndTheWindowCollective: SymmetricAlloc on one rank alone
// returns at once (allocation is local); registering the window is the collective
// step, and a rank that registers alone gets a timeout saying that a collective waits until every rank joins it.
// Registered by every rank, the window serves an all-reduce.
func TestSymmetricAllocIsLocalAndTheWindowCollective(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			bs := make([]*nccl.Backend, n)
			for r := range n {
				bs[r], err = c.NCCL(r)
				require.NoError(t, err)
			}
			alone, err := bs[0].SymmetricAlloc(8192) // returns: no peer takes part
			require.NoError(t, err)
			require.NoError(t, bs[0].SymmetricFree(alone))
			require.True(t, bs[0].IsHealthy())

			ps := make([]comm.DevicePtr, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					if ps[r], errs[r] = bs[r].SymmetricAlloc(4096); errs[r] == nil {
						_, errs[r] = bs[r].RegisterWindow(context.Background(), ps[r], 4096)
					}
				})
			}
			wg.Wait()
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
			}
			ones, err := commtest.EncodeValues(comm.BFloat16, []float64{1, 1, 1, 1})
			require.NoError(t, err)
			for r := range n {
				require.NoError(t, c.Write(r, ps[r], ones))
			}
			for r := range n {
				wg.Go(func() { errs[r] = bs[r].AllReduce(ps[r], 8) })
			}
			wg.Wait()
			for r := range n {
				require.NoError(t, errs[r], "rank %d", r)
				got, err := c.Read(r, ps[r], 8)
				require.NoError(t, err)
				v, err := commtest.DecodeValues(comm.BFloat16, got)
				require.NoError(t, err)
				require.Equal(t, []float64{float64(n), float64(n), float64(n), float64(n)}, v, "rank %d", r)
			}
		})
	}
	t.Run("alone", func(t *testing.T) {
		// The timeout bounds the cluster's init too: a second, as fast gives.
		c, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Second), nccl.WithLogger(quietLog)))
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		b, err := c.NCCL(0)
		require.NoError(t, err)
		p, err := b.SymmetricAlloc(4096)
		require.NoError(t, err)
		_, err = b.RegisterWindow(context.Background(), p, 4096) // rank 1 never registers
		require.ErrorIs(t, err, comm.ErrTimeout)
		assert.Contains(t, err.Error(), "register-window of 4096 bytes on rank 0")
		assert.Contains(t, err.Error(), "a collective waits until every rank joins it")
	})
}

// An argument error names the rank that made the call: a bad size on rank 1 of two says
// "on rank 1" and carries the rank, and still matches its sentinel and *comm.ArgError.
func TestArgErrorsNameTheRank(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	b := c.NCCLs()[1]
	ctx := context.Background()
	for name, tc := range map[string]struct {
		call func() error
		want error
	}{
		"backend all-reduce of -2 bytes": {func() error { return b.AllReduce(0, -2) }, comm.ErrInvalidSize},
		"backend all-reduce of 3 bytes":  {func() error { return b.AllReduce(0, 3) }, comm.ErrInvalidSize},
		"all-gather of -1 bytes":         {func() error { return b.AllGather(0, 0, -1) }, comm.ErrInvalidSize},
		"typed all-reduce of -1 elements": {func() error {
			return b.Communicator().AllReduce(0, -1, comm.Float32, comm.Sum)
		}, comm.ErrInvalidSize},
		"shrink excluding itself": {func() error {
			_, err := b.Shrink(ctx, []int{1})
			return err
		}, comm.ErrInvalidRank},
	} {
		err := tc.call()
		var ae *comm.ArgError
		require.ErrorAs(t, err, &ae, name)
		assert.ErrorIs(t, err, tc.want, name)
		assert.True(t, ae.HasRank, name)
		assert.Equal(t, 1, ae.Rank, name)
		assert.Contains(t, err.Error(), "on rank 1", name)
	}
}
