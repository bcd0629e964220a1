//go:build cgo

package mpi_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// TestMPICollectiveCheck: with the collective check on (the option, or PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL), a collective whose last rank differs in count,
// operation, root, element type or reduction fails on every rank with a
// *comm.MismatchError naming both calls; a matching collective after them succeeds.
// Without the check, MPI returns nil from the count mismatch on the ranks with the
// larger count (a partial result).
func TestMPICollectiveCheck(t *testing.T) {
	if inRank(t) {
		mpiRankCollectiveCheck(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(strconv.Itoa(np)+"-ranks-option", func(t *testing.T) {
			runMPI(t, np, "TestMPICollectiveCheck", "NCCLGO_TEST_CHECK_BY=option")
		})
		t.Run(strconv.Itoa(np)+"-ranks-torch-env", func(t *testing.T) {
			runMPI(t, np, "TestMPICollectiveCheck", "NCCLGO_TEST_CHECK_BY=env", "TORCH_DISTRIBUTED_DEBUG=DETAIL")
		})
	}
}

func mpiRankCollectiveCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opts []mpi.Option
	if os.Getenv("NCCLGO_TEST_CHECK_BY") == "option" {
		opts = append(opts, mpi.WithCollectiveCheck(true))
	}
	c, err := mpi.New(ctx, opts...)
	require.NoError(t, err)
	defer c.Close()
	rank, n := c.Rank(), c.WorldSize()
	last := rank == n-1
	buf, p := hostBuf[float32](t, 2048)
	out, q := hostBuf[float32](t, 2048*n)
	_ = out
	pick := func(a, b int) int {
		if last {
			return b
		}
		return a
	}
	cases := []struct {
		name string
		call func() error
		a, b string // the signatures rank 0's and the last rank's calls show
	}{
		{"count", func() error { return c.AllReduce(p, pick(1024, 512), comm.Float32, comm.Sum) },
			"all-reduce #1 (count 1024, float32, sum)", "all-reduce #1 (count 512, float32, sum)"},
		{"op", func() error {
			if last {
				return c.Broadcast(p, 1024, comm.Float32, 0)
			}
			return c.AllReduce(p, 1024, comm.Float32, comm.Sum)
		}, "all-reduce #2 (count 1024, float32, sum)", "broadcast #2 (count 1024, float32, root 0)"},
		{"root", func() error { return c.Broadcast(p, 256, comm.Float32, pick(0, 1)) },
			"broadcast #3 (count 256, float32, root 0)", "broadcast #3 (count 256, float32, root 1)"},
		{"type", func() error { return c.AllGather(p, q, 64, comm.DType(pick(int(comm.Float32), int(comm.Int32)))) },
			"all-gather #4 (count 64, float32)", "all-gather #4 (count 64, int32)"},
		{"reduction", func() error {
			return c.AllReduce(p, 8, comm.Float32, comm.ReduceOp(pick(int(comm.Sum), int(comm.Max))))
		}, "all-reduce #5 (count 8, float32, sum)", "all-reduce #5 (count 8, float32, max)"},
	}
	for _, tc := range cases {
		err := tc.call()
		require.Error(t, err, "%s mismatch on rank %d", tc.name, rank)
		assert.ErrorIs(t, err, comm.ErrMismatch)
		var me *comm.MismatchError
		require.True(t, errors.As(err, &me), "%s: %v", tc.name, err)
		assert.Equal(t, 0, me.Rank, tc.name)
		assert.Equal(t, n-1, me.OtherRank, tc.name)
		assert.Equal(t, []int{n - 1}, me.Ranks, tc.name)
		assert.Equal(t, tc.a, me.A.String(), tc.name)
		assert.Equal(t, tc.b, me.B.String(), tc.name)
		assert.Contains(t, err.Error(), tc.a)
		assert.Contains(t, err.Error(), tc.b)
	}
	for i := range buf[:16] {
		buf[i] = 1
	}
	require.NoError(t, c.AllReduce(p, 16, comm.Float32, comm.Sum), "a matching collective after the mismatches")
	assert.Equal(t, float32(n), buf[0])
}
