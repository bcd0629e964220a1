package comm

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// TestBackendShrink checks the order of calls per NCCL version: revoke first where
// NCCL has it, NCCL_SHRINK_ABORT where it does not, and a clear error before 2.27.
func TestBackendShrink(t *testing.T) {
	tests := []struct {
		version int
		calls   []string
		err     string
	}{
		{version: 22907, calls: []string{"CommRevoke", "CommShrink([0],0)"}},
		{version: 22807, calls: []string{"CommRevoke", "CommShrink([0],0)"}},
		{version: 22703, calls: []string{"CommShrink([0],1)"}},
		{version: 22603, err: "shrink: nccl version 2.26.3: unsupported operation: ncclCommShrink (and a driver reporting rank and size) needs NCCL 2.27.3 (loaded 2.26.3)"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.version), func(t *testing.T) {
			f := newFake()
			f.version = tt.version
			f.splitRank, f.splitWorld = 1, 3
			b := newFakeNCCL(t, f, 2, 4, quiet, WithElementType(Float32))
			nb, err := b.Shrink(context.Background(), []int{0})
			if tt.err != "" {
				require.ErrorIs(t, err, ErrUnsupported)
				assert.Contains(t, err.Error(), tt.err)
				assert.Empty(t, f.named("CommRevoke", "CommShrink"))
				return
			}
			require.NoError(t, err)
			defer nb.Close()
			assert.Equal(t, tt.calls, f.named("CommRevoke", "CommShrink"))
			assert.Equal(t, 1, nb.Rank())
			assert.Equal(t, 3, nb.WorldSize())
			assert.Equal(t, Float32, nb.ElementType())
			assert.True(t, nb.IsHealthy())
			assert.False(t, b.IsHealthy(), "the old backend is done")
			require.NoError(t, nb.AllReduce(p, 8))
			assert.ErrorIs(t, nb.AttemptReconnect(context.Background()), ErrUnsupported, "no reconnect outside a job")
			require.NoError(t, b.Close())
			require.NoError(t, nb.AllReduce(p, 8), "closing the old backend leaves the new one")
		})
	}
}

func TestBackendShrinkRejectsBadListsBeforeRevoking(t *testing.T) {
	f := newFake()
	b := newFakeNCCL(t, f, 2, 4, quiet)
	for _, bad := range [][]int{{4}, {-1}, {1, 1}, {2}} {
		_, err := b.Shrink(context.Background(), bad)
		assert.ErrorIs(t, err, ErrInvalidRank, "%v", bad)
	}
	require.NoError(t, b.GroupStart())
	_, err := b.Shrink(context.Background(), []int{0})
	assert.ErrorIs(t, err, ErrGroupOpen)
	require.NoError(t, b.GroupEnd())
	assert.Empty(t, f.named("CommRevoke", "CommShrink"))
	assert.True(t, b.IsHealthy())
}

func TestBackendShrinkFallsBackToAbortWhenRevokeFails(t *testing.T) {
	f := newFake()
	f.splitRank, f.splitWorld = 0, 1
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.fail("CommRevoke", &gpulib.Error{Code: gpulib.RemoteError})
	nb, err := b.Shrink(context.Background(), []int{1})
	require.NoError(t, err)
	defer nb.Close()
	assert.Equal(t, []string{"CommRevoke", "CommShrink([1],1)"}, f.named("CommRevoke", "CommShrink"))
}

// Survivors of a job shrink, and the shrunk backends reconnect among themselves in a
// group of their own, with their new numbering, even after the old backends (which
// owned the job) are closed.
func TestShrunkJobBackendsReconnectAmongTheSurvivors(t *testing.T) {
	noLeaks(t)
	const world = 3
	port := freePort(t)
	fakes := map[int]idFake{0: newIDFake(), 1: newIDFake(), 2: newIDFake()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*NCCL, error) {
		return Connect(ctx, WithJob(jobOf(port, r, world)), withDevice(fakes[r]), quiet)
	})
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	require.NoError(t, bs[2].Close()) // rank 2 dies
	survivors := []int{0, 1}
	shrunk, errs := onRanks(survivors, func(r int) (*NCCL, error) {
		fakes[r].splitRank, fakes[r].splitWorld = ShrunkRank(r, []int{2}), 2
		return bs[r].Shrink(ctx, []int{2})
	})
	for _, r := range survivors {
		require.NoError(t, errs[r], "rank %d", r)
		require.NoError(t, bs[r].Close(), "rank %d", r)
	}
	_, errs = onRanks(survivors, func(r int) (struct{}, error) { return struct{}{}, shrunk[r].AttemptReconnect(ctx) })
	for _, r := range survivors {
		require.NoError(t, errs[r], "rank %d", r)
		m := memberOf(shrunk[r])
		assert.Equal(t, "default/shrink0", m.group)
		assert.Equal(t, uint64(1), m.generation())
		assert.Equal(t, r, m.rank)
		assert.Equal(t, 2, m.world)
		ids := fakes[r].initIDs()
		require.Len(t, ids, 2, "rank %d: the first communicator and the reconnected one", r)
		assert.Equal(t, fakes[0].initIDs()[1], ids[1], "rank %d", r)
	}
	closeAll(t, shrunk)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err, "the last backend of rank 0 closed the store")
	require.NoError(t, l.Close())
}

// A world shrunk to two ranks keeps the add kernel, so it takes the two-rank path.
func TestShrinkKeepsTheAddKernel(t *testing.T) {
	f := newFake()
	f.splitRank, f.splitWorld = 0, 2
	b := newFakeNCCL(t, f, 0, 3, quiet)
	require.NoError(t, b.SetAddKernel(0x77))
	nb, err := b.Shrink(context.Background(), []int{2})
	require.NoError(t, err)
	defer nb.Close()
	f.log()
	require.NoError(t, nb.AllReduce(p, 64))
	assert.Empty(t, f.named("AllReduce"), "no ncclAllReduce")
	assert.Len(t, f.named("LaunchKernel"), 1, "the add kernel")
}
