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

// The real libnccl (2.29.7) has the one-sided calls, and its own argument errors reach
// comm as *gpulib.Error with NCCL's result: a null communicator is an invalid
// argument, also for ncclWinGetUserPtr.
func TestOneSidedCallsReachTheRealLibrary(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	for name, call := range map[string]func() error{
		"PutSignal":  func() error { return d.PutSignal(0x1000, 8, gpulib.Uint8, 1, 1, 0, 0, 0, 0, 0, 0) },
		"Signal":     func() error { return d.Signal(1, 0, 0, 0, 0, 0) },
		"WaitSignal": func() error { return d.WaitSignal([]gpulib.SignalDesc{{OpCnt: 1, Peer: 1}}, 0, 0) },
		"WinGetUserPtr": func() error {
			_, err := d.WinGetUserPtr(0, 1)
			return err
		},
	} {
		err := call()
		var se *gpulib.Error
		require.ErrorAs(t, err, &se, name)
		assert.Equal(t, gpulib.InvalidArgument, se.Code, name)
		assert.ErrorIs(t, err, nccl.InvalidArgument, name)
	}
}

// A group takes the one-sided calls, as NCCL does between ncclGroupStart and
// ncclGroupEnd: the raw driver's Batch records them (ncclWaitSignal with its own copy of
// the descriptors, pinned while the batch runs) and Submit makes them in the group's one crossing into the real
// libnccl. On the null communicator NCCL rejects the first; Submit names it, with the
// text the same call made on its own gets, and every recorded call was made.
func TestOneSidedCallsAreRecordedInAGroup(t *testing.T) {
	libcache.Load(t)
	d := &Driver{}
	descs := []gpulib.SignalDesc{{OpCnt: 1, Peer: 1}, {OpCnt: 2, Peer: 2}}
	for _, first := range []gpulib.Fn{gpulib.FnWaitSignal, gpulib.FnPutSignal, gpulib.FnSignal} {
		calls := []gpulib.Call{
			{Fn: first, Send: 0x1000, Count: 8, Type: gpulib.Uint8, Peer: 1, Win: 1, Descs: descs},
			{Fn: gpulib.FnSignal, Peer: 1},
			{Fn: gpulib.FnSend, Send: 0x1000, Count: 8, Type: gpulib.Uint8, Peer: 1},
		}
		failed, err := d.Submit(calls)
		assert.Equal(t, 0, failed, "%v: the first call is the first that NCCL rejects", first)
		var be *gpulib.Error
		require.ErrorAs(t, err, &be, first.String())
		assert.Equal(t, gpulib.InvalidArgument, be.Code, first.String())
		direct := calls[0].Make(d)
		var de *nccl.Error
		require.ErrorAs(t, direct, &de, first.String())
		assert.Equal(t, de.Detail, be.Detail, "%v: the text the call gets on its own", first)
	}

	b := gpulib.NewBatch(d)
	ob, ok := b.(gpulib.OneSidedBatch)
	require.True(t, ok, "the raw driver's Batch records one-sided calls")
	require.NoError(t, ob.WaitSignal(descs, 0, 0))
	descs[0].Peer = 7 // the batch has its own copy
	require.NoError(t, ob.PutSignal(0x1000, 8, gpulib.Uint8, 1, 1, 0, 0, 0, 0, 0))
	require.NoError(t, ob.Signal(1, 0, 0, 0, 0))
	raw := &b.(*Batch).raw
	assert.Equal(t, 4, raw.Len(), "ncclGroupStart and the three calls")
	assert.Equal(t, int32(1), b.(*Batch).descs[0][0].Peer, "the recorded copy")
	err := b.(*Batch).Run()
	var be *nccl.BatchError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "ncclWaitSignal", be.Func)
	assert.Contains(t, be.Detail(), "WaitSignal", "NCCL's own text")
	for i := 1; i < raw.Len(); i++ {
		r, ran := raw.Result(i)
		assert.True(t, ran, "call %d is made after a failure (NCCL defers errors to ncclGroupEnd)", i)
		assert.Equal(t, nccl.InvalidArgument, r, "call %d", i)
	}
	b.Reset()
	assert.Zero(t, b.(*Batch).nDescs, "Reset forgets the descriptors")
}
