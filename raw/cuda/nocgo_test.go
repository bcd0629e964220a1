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

	var v int32
	assert.ErrorIs(t, cuda.DriverGetVersion(&v), cuda.ErrNeedsCgo)
	assert.ErrorIs(t, cuda.Init(0), cuda.ErrNeedsCgo)
	assert.Equal(t, "cuda: CUresult 100", cuda.ErrorNoDevice.Error(), "without the library a result is its number")
}
