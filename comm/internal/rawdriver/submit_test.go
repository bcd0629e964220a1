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
	var b nccl.Batch
	require.NoError(t, Record(&b, calls))
	assert.Equal(t, len(calls)+2, b.Len())
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = Record(&b, calls) }))
	assert.Error(t, Record(&b, []gpulib.Call{{Fn: 0}}), "an unknown function is refused")
}
