//go:build cgo

package nccl_test

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// inChildWith runs test in a child process with the cached libnccl of set loaded; it
// returns true in the child.
func inChildWith(t *testing.T, test, set string) bool {
	t.Helper()
	if dltest.InChild() {
		return true
	}
	dltest.RunChild(t, test, append(cleanEnv(), "NCCLGO_LIBNCCL="+dltest.Lib(t, set))...)
	return false
}

// buf is the buffer of every call: NCCL rejects the NULL communicator before it looks
// at buffers (there is no GPU to make a communicator).
var buf unsafe.Pointer

// groupOf records into b, or calls raw when b is nil, a group of n sends and receives on
// the NULL communicator, which NCCL rejects at once, and returns each call's error.
func groupOf(t testing.TB, b *nccl.Batch, n int) []error {
	t.Helper()
	var errs []error
	do := func(err error) { errs = append(errs, err) }
	if b == nil {
		do(nccl.GroupStart())
		for i := range n {
			if i%2 == 0 {
				do(nccl.Send(buf, 8, nccl.Float32, int32(i), 0, 0))
			} else {
				do(nccl.Recv(buf, 8, nccl.Float32, int32(i), 0, 0))
			}
		}
		do(nccl.GroupEnd())
		return errs
	}
	require.NoError(t, b.GroupStart())
	for i := range n {
		if i%2 == 0 {
			require.NoError(t, b.Send(buf, 8, nccl.Float32, int32(i), 0, 0))
		} else {
			require.NoError(t, b.Recv(buf, 8, nccl.Float32, int32(i), 0, 0))
		}
	}
	require.NoError(t, b.GroupEnd())
	return nil
}

// batchName names call i of groupOf's group of n.
func batchName(i, n int) string {
	switch {
	case i == 0:
		return "GroupStart"
	case i == n+1:
		return "GroupEnd"
	case i%2 == 1:
		return "Send"
	}
	return "Recv"
}

func resultOf(t *testing.T, err error) nccl.Result {
	t.Helper()
	if err == nil {
		return nccl.Success
	}
	var r nccl.Result
	require.ErrorAs(t, err, &r)
	return r
}

// TestBatchGivesWhatTheRawCallsGive makes the same group through the raw functions and
// through a Batch (one crossing) with the real libnccl 2.29.7: every call's result must be
// the same, and the batch's error must name the first failing call with the text NCCL
// gave the raw call.
func TestBatchGivesWhatTheRawCallsGive(t *testing.T) {
	if !inChildWith(t, "TestBatchGivesWhatTheRawCallsGive", dltest.NCCL2297) {
		return
	}
	// NCCL keeps the group state per thread: the raw calls of one group must all be made
	// on the same thread (a Batch makes its calls in one C call, so on one thread).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 5
	raw := groupOf(t, nil, n)
	var firstRaw *nccl.Error
	for _, err := range raw {
		if err != nil {
			require.ErrorAs(t, err, &firstRaw)
			break
		}
	}
	require.NotNil(t, firstRaw, "NCCL must reject sends on the NULL communicator")
	require.NotEmpty(t, firstRaw.Detail)

	var b nccl.Batch
	groupOf(t, &b, n)
	require.Equal(t, n+2, b.Len())
	for range 2 { // a recorded batch runs again with the same results
		err := b.Run()
		var be *nccl.BatchError
		require.ErrorAs(t, err, &be)
		assert.Equal(t, 1, be.Index, "the first send fails")
		assert.Equal(t, n+2, be.Calls)
		assert.Equal(t, "ncclSend", be.Func)
		assert.Equal(t, firstRaw.Result, be.Result)
		assert.Equal(t, firstRaw.Detail, be.Detail(), "the library's text, taken right after the failing call")
		assert.ErrorIs(t, err, firstRaw.Result)
		assert.Equal(t, "nccl batch: call 1 of 7 (ncclSend): "+firstRaw.Result.Error()+": "+firstRaw.Detail, err.Error())
		for i, rawErr := range raw {
			got, ran := b.Result(i)
			assert.True(t, ran, "call %d ran", i)
			assert.Equal(t, resultOf(t, rawErr), got, "call %d (%s)", i, batchName(i, n))
		}
	}
	_, ran := b.Result(-1)
	assert.False(t, ran)
	_, ran = b.Result(n + 2)
	assert.False(t, ran)

	b.Reset()
	assert.Zero(t, b.Len())
	assert.NoError(t, b.Run(), "an empty batch has nothing to fail")
	// Outside a group a failing call leaves nothing open; the next calls still work.
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.GroupEnd())
	assert.NoError(t, b.Run())
}

// TestBatchRunUntilFailureStops checks that the calls after the first failure are not
// made.
func TestBatchRunUntilFailureStops(t *testing.T) {
	if !inChildWith(t, "TestBatchRunUntilFailureStops", dltest.NCCL2297) {
		return
	}
	var b nccl.Batch
	require.NoError(t, b.Send(buf, 8, nccl.Float32, 1, 0, 0))
	require.NoError(t, b.Recv(buf, 8, nccl.Float32, 1, 0, 0))
	err := b.RunUntilFailure()
	var be *nccl.BatchError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, 0, be.Index)
	assert.ErrorIs(t, err, nccl.InvalidArgument)
	assert.Contains(t, be.Detail(), "comm argument is NULL")
	r, ran := b.Result(0)
	assert.True(t, ran)
	assert.Equal(t, nccl.InvalidArgument, r)
	_, ran = b.Result(1)
	assert.False(t, ran, "the call after the failure is not made")
	require.Error(t, b.Run())
	_, ran = b.Result(1)
	assert.True(t, ran, "Run makes every call")
}

// TestBatchRecordsOnlyWhatTheLibraryHas: with libnccl 2.22.3, which lacks ncclAlltoAll,
// recording it fails with the symbol error and records nothing.
func TestBatchRecordsOnlyWhatTheLibraryHas(t *testing.T) {
	if !inChildWith(t, "TestBatchRecordsOnlyWhatTheLibraryHas", dltest.NCCL2223) {
		return
	}
	var b nccl.Batch
	err := b.AlltoAll(buf, buf, 8, nccl.Float32, 0, 0)
	require.ErrorIs(t, err, nccl.ErrSymbolNotFound)
	assert.Contains(t, err.Error(), "ncclAlltoAll")
	assert.Zero(t, b.Len())
	require.NoError(t, b.AllReduce(buf, buf, 8, nccl.Float32, nccl.Sum, 0, 0))
	assert.Equal(t, 1, b.Len())
}

// TestBatchDoesNotAllocate: recording and running a group, failures included, allocates
// nothing once the batch has grown.
func TestBatchDoesNotAllocate(t *testing.T) {
	if !inChildWith(t, "TestBatchDoesNotAllocate", dltest.NCCL2297) {
		return
	}
	var b nccl.Batch
	groupOf(t, &b, 64)
	var err error
	allocs := testing.AllocsPerRun(100, func() {
		b.Reset()
		groupOf(t, &b, 64)
		err = b.Run()
	})
	assert.Zero(t, allocs)
	var be *nccl.BatchError
	assert.True(t, errors.As(err, &be))
}
