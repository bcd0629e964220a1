package commtest_test

import (
	"errors"
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

// TestGroupIsOneSubmission checks that an all-to-all written as a group of sends and
// receives (a mixture-of-experts exchange, nested one level) reaches the library as one
// submission per rank and outermost GroupEnd, holding every call, and that the data
// arrives as if each call had been made on its own.
func TestGroupIsOneSubmission(t *testing.T) {
	const n, block = 4, 16
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	send, recv := make([]comm.DevicePtr, n), make([]comm.DevicePtr, n)
	for r := range n {
		send[r], err = c.Alloc(r, n*block)
		require.NoError(t, err)
		recv[r], err = c.Alloc(r, n*block)
		require.NoError(t, err)
		data := make([]byte, n*block)
		for i := range data {
			data[i] = byte(r*16 + i/block)
		}
		require.NoError(t, c.Write(r, send[r], data))
	}
	before := make([]int64, n)
	for r := range n {
		before[r], err = c.Submits(r)
		require.NoError(t, err)
	}
	bs := c.Backends()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			b := bs[r]
			if err := b.GroupStart(); err != nil {
				errs[r] = err
				return
			}
			if err := b.GroupStart(); err != nil {
				errs[r] = errors.Join(err, b.GroupEnd())
				return
			}
			var opErrs []error
			for p := range n {
				if p == r {
					continue
				}
				opErrs = append(opErrs, b.SendTo(send[r]+comm.DevicePtr(p*block), block, p, 0),
					b.RecvFrom(recv[r]+comm.DevicePtr(p*block), block, p, 0))
			}
			inner := b.GroupEnd()
			if s, err := c.Submits(r); err != nil || s != before[r] {
				opErrs = append(opErrs, errors.New("an inner GroupEnd submitted"))
			}
			errs[r] = errors.Join(append(opErrs, inner, b.GroupEnd())...)
		})
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		s, err := c.Submits(r)
		require.NoError(t, err)
		assert.Equal(t, before[r]+1, s, "rank %d: one submission for the whole group", r)
		require.NoError(t, c.SyncStream(r, 0))
		got, err := c.Read(r, recv[r], n*block)
		require.NoError(t, err)
		for p := range n {
			if p == r {
				continue
			}
			for i := range block {
				require.Equal(t, byte(p*16+r), got[p*block+i], "rank %d: block from rank %d", r, p)
			}
		}
	}
}

// TestGroupEndNamesTheRejectedCall checks that a call NCCL rejects inside a group (here
// a receive that runs past the end of its buffer's allocation: comm cannot know, the
// simulated NCCL checks it) is accepted by the operation and reported by GroupEnd, naming the
// operation, its rank and peer, with NCCL's result and text; the group is dropped and
// the communicator stays usable (an invalid argument is not fatal).
func TestGroupEndNamesTheRejectedCall(t *testing.T) {
	c, err := commtest.NewCluster(2, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	buf, err := c.Alloc(0, 64)
	require.NoError(t, err)
	b, err := c.Backend(0)
	require.NoError(t, err)
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(buf, 64, 1, 0))
	require.NoError(t, b.RecvFrom(buf+32, 64, 1, 0), "NCCL's own checks run at the outermost GroupEnd")
	err = b.GroupEnd()
	require.Error(t, err)
	assert.ErrorIs(t, err, rawnccl.InvalidArgument)
	var outer *comm.OpError
	require.ErrorAs(t, err, &outer)
	assert.Equal(t, "group-end", outer.Op)
	var op *comm.OpError
	require.ErrorAs(t, outer.Err, &op)
	assert.Equal(t, "recv", op.Op)
	assert.Equal(t, 0, op.Rank)
	assert.Equal(t, 1, op.Peer)
	assert.Equal(t, 64, op.Bytes)
	assert.Contains(t, err.Error(), "recv of 64 bytes on rank 0 from rank 1")
	assert.Contains(t, err.Error(), "ncclRecv", "NCCL's (the simulator's) own text")
	assert.Contains(t, err.Error(), "past the end")
	assert.True(t, b.IsHealthy(), "an invalid argument leaves the communicator usable")
	assert.NotErrorIs(t, err, comm.ErrUnhealthy)
}
