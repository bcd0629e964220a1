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
}
