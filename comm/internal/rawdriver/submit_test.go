//go:build cgo

package rawdriver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestSubmitNamesTheFirstFailingCall submits a group to the real libnccl in one
// crossing. There is no GPU here, so the calls are on the null communicator, which NCCL
// rejects: Submit reports the first call's index with NCCL's result and its own text,
// the text the same call made on its own carries.
func TestSubmitNamesTheFirstFailingCall(t *testing.T) {
	libcache.Load(t)
	calls := []gpulib.Call{
		{Fn: gpulib.FnSend, Send: 0x1000, Count: 8, Type: gpulib.Uint8, Peer: 1},
		{Fn: gpulib.FnRecv, Send: 0x2000, Count: 8, Type: gpulib.Uint8, Peer: 1},
		{Fn: gpulib.FnAllReduce, Send: 0x1000, Recv: 0x1000, Count: 4, Type: gpulib.Float32, Op: gpulib.Sum},
	}
	failed, err := (&Driver{}).Submit(calls)
	require.Error(t, err)
	assert.Equal(t, 0, failed, "the first call is the first that NCCL rejects")
	var se *gpulib.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, gpulib.InvalidArgument, se.Code)
	assert.NotEmpty(t, se.Detail, "NCCL's own text (ncclGetLastError right after the call)")
	var ne *nccl.Error
	require.ErrorAs(t, err, &ne, "raw's error, as the other calls return")
	assert.Equal(t, se.Detail, ne.Detail)
	assert.ErrorIs(t, err, nccl.InvalidArgument)

	direct := (&Driver{}).Send(0x1000, 8, gpulib.Uint8, 1, 0, 0)
	var de *nccl.Error
	require.ErrorAs(t, direct, &de)
	assert.Equal(t, de.Detail, se.Detail, "the same text as the call made on its own")

	failed, err = (&Driver{}).Submit(nil)
	assert.NoError(t, err, "an empty group is ncclGroupStart + ncclGroupEnd")
	assert.Zero(t, failed)
}

// TestRecordAllocatesNothing checks that recording a warm group of every function into a
// Batch allocates nothing.
func TestRecordAllocatesNothing(t *testing.T) {
	libcache.Load(t)
	var calls []gpulib.Call
	for f := gpulib.FnSend; f <= gpulib.FnScatter; f++ {
		calls = append(calls, gpulib.Call{Fn: f, Count: 1, Type: gpulib.Uint8})
	}
	var b Batch
	require.NoError(t, b.Record(calls))
	assert.Equal(t, len(calls)+1, b.raw.Len(), "ncclGroupStart and the calls")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = b.Record(calls) }))
	assert.Error(t, b.Record([]gpulib.Call{{Fn: 0}}), "an unknown function is refused")
}

// TestBatchRecordsAsCallsAreMade checks the Batch that comm records a group into: each
// call is recorded as it is made, after ncclGroupStart, Submit adds ncclGroupEnd and
// reports the first call NCCL rejects by its index among the recorded calls, and Reset
// makes the Batch ready for the next group, which then records and runs allocating
// nothing.
func TestBatchRecordsAsCallsAreMade(t *testing.T) {
	libcache.Load(t)
	var d gpulib.Driver = &Driver{}
	b := gpulib.NewBatch(d)
	require.IsType(t, &Batch{}, b, "the raw driver records straight into an nccl.Batch")
	assert.True(t, b.Accepts(&Driver{ordinal: 1}), "every raw driver calls the same libnccl")
	assert.False(t, b.Accepts(nil))
	group := func() (int, error) {
		b.Reset()
		if err := b.Send(0x1000, 8, gpulib.Uint8, 1, 0, 0); err != nil {
			return -2, err
		}
		if err := b.Recv(0x2000, 8, gpulib.Uint8, 1, 0, 0); err != nil {
			return -2, err
		}
		return b.Submit()
	}
	failed, err := group()
	assert.Equal(t, 0, failed, "the send on the null communicator is rejected first")
	var se *gpulib.Error
	require.ErrorAs(t, err, &se)
	assert.Equal(t, gpulib.InvalidArgument, se.Code)
	assert.NotEmpty(t, se.Detail, "NCCL's own text")
	assert.Equal(t, 4, b.(*Batch).raw.Len(), "start, send, recv, end")
	r, ran := b.(*Batch).raw.Result(3)
	assert.True(t, ran, "ncclGroupEnd is called after a failure")
	assert.NotEqual(t, nccl.Success, r, "and fails too: NCCL dropped the group")
	run := func() {
		b.Reset()
		_ = b.Send(0x1000, 8, gpulib.Uint8, 1, 0, 0)
		_ = b.(*Batch).Run()
	}
	assert.Zero(t, testing.AllocsPerRun(100, run), "recording and running a warm group")

	b.Reset()
	failed, err = b.Submit()
	assert.NoError(t, err, "an empty group is ncclGroupStart + ncclGroupEnd")
	assert.Zero(t, failed)
}
