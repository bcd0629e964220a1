//go:build !cgo

package nccl_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/nccl"
)

func TestWithoutCgoCallsReturnErrNeedsCgo(t *testing.T) {
	_, err := nccl.LoadedVersion()
	require.ErrorIs(t, err, nccl.ErrNeedsCgo)
	assert.ErrorIs(t, nccl.LibraryInfo().Err, nccl.ErrNeedsCgo)
	assert.Empty(t, nccl.LibraryInfo().Path)

	var v int32
	assert.ErrorIs(t, nccl.GetVersion(&v), nccl.ErrNeedsCgo)
	var id nccl.UniqueId
	assert.ErrorIs(t, nccl.GetUniqueId(&id), nccl.ErrNeedsCgo)
	_, err = nccl.GetErrorString(nccl.InvalidArgument)
	assert.ErrorIs(t, err, nccl.ErrNeedsCgo)
	assert.Equal(t, "nccl: result 4", nccl.InvalidArgument.Error(), "without the library a result is its number")
	c := nccl.NewConfig()
	assert.EqualValues(t, nccl.ConfigUndefInt, c.Blocking, "types and constants work without cgo")
}

func TestWithoutCgoABatchRecordsNothingAndRunsNothing(t *testing.T) {
	var b nccl.Batch
	assert.ErrorIs(t, b.GroupStart(), nccl.ErrNeedsCgo)
	assert.Zero(t, b.Len())
	assert.ErrorIs(t, b.Run(), nccl.ErrNeedsCgo)
	assert.ErrorIs(t, b.RunUntilFailure(), nccl.ErrNeedsCgo)
}
