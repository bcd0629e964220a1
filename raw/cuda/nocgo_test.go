//go:build !cgo

package cuda_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

func TestWithoutCgoCallsReturnErrNeedsCgo(t *testing.T) {
	_, err := cuda.LoadedVersion()
	require.ErrorIs(t, err, cuda.ErrNeedsCgo)
	assert.ErrorIs(t, cuda.LibraryInfo().Err, cuda.ErrNeedsCgo)
	assert.Empty(t, cuda.LibraryInfo().Path)
}
