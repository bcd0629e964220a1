package nccl

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
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
			f := fakegpu.New()
			f.Ver = tt.version
			f.SplitRank, f.SplitWorld = 1, 3
			b := newFakeNCCL(t, f, 2, 4, quiet, WithElementType(comm.Float32))
			nb, err := b.Shrink(context.Background(), []int{0})
			if tt.err != "" {
				require.ErrorIs(t, err, comm.ErrUnsupported)
				assert.Contains(t, err.Error(), tt.err)
				assert.Empty(t, f.Named("CommRevoke", "CommShrink"))
				return
			}
			require.NoError(t, err)
			defer nb.Close()
			assert.Equal(t, tt.calls, f.Named("CommRevoke", "CommShrink"))
			assert.Equal(t, 1, nb.Rank())
			assert.Equal(t, 3, nb.WorldSize())
			assert.Equal(t, comm.Float32, nb.ElementType())
			assert.True(t, nb.IsHealthy())
			assert.False(t, b.IsHealthy(), "the old backend is done")
			require.NoError(t, nb.AllReduce(p, 8))
			assert.ErrorIs(t, nb.AttemptReconnect(context.Background()), comm.ErrUnsupported, "no reconnect outside a job")
			require.NoError(t, b.Close())
			require.NoError(t, nb.AllReduce(p, 8), "closing the old backend leaves the new one")
		})
	}
}

func TestBackendShrinkRejectsBadListsBeforeRevoking(t *testing.T) {
	f := fakegpu.New()
	b := newFakeNCCL(t, f, 2, 4, quiet)
	for _, bad := range [][]int{{4}, {-1}, {1, 1}, {2}} {
		_, err := b.Shrink(context.Background(), bad)
		assert.ErrorIs(t, err, comm.ErrInvalidRank, "%v", bad)
	}
	require.NoError(t, b.GroupStart())
	_, err := b.Shrink(context.Background(), []int{0})
	assert.ErrorIs(t, err, comm.ErrGroupOpen)
	require.NoError(t, b.GroupEnd())
	assert.Empty(t, f.Named("CommRevoke", "CommShrink"))
	assert.True(t, b.IsHealthy())
}

func TestBackendShrinkFallsBackToAbortWhenRevokeFails(t *testing.T) {
	f := fakegpu.New()
	f.SplitRank, f.SplitWorld = 0, 1
	b := newFakeNCCL(t, f, 0, 2, quiet)
	f.Fail("CommRevoke", &gpulib.Error{Code: gpulib.RemoteError})
	nb, err := b.Shrink(context.Background(), []int{1})
	require.NoError(t, err)
	defer nb.Close()
	assert.Equal(t, []string{"CommRevoke", "CommShrink([1],1)"}, f.Named("CommRevoke", "CommShrink"))
}

// A world shrunk to two ranks keeps the add kernel, so it takes the two-rank path.
func TestShrinkKeepsTheAddKernel(t *testing.T) {
	f := fakegpu.New()
	f.SplitRank, f.SplitWorld = 0, 2
	b := newFakeNCCL(t, f, 0, 3, quiet)
	require.NoError(t, b.SetAddKernel(0x77))
	nb, err := b.Shrink(context.Background(), []int{2})
	require.NoError(t, err)
	defer nb.Close()
	f.Log()
	require.NoError(t, nb.AllReduce(p, 64))
	assert.Empty(t, f.Named("AllReduce"), "no ncclAllReduce")
	assert.Len(t, f.Named("LaunchKernel"), 1, "the add kernel")
}
