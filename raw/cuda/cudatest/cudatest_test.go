package cudatest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda/cudatest"
)

func TestEmptyCopiesCallNothing(t *testing.T) {
	// No context is current here (no cuInit): any driver call would fail.
	require.NoError(t, cudatest.Upload[float32](0, nil))
	require.NoError(t, cudatest.Download(make([]uint16, 0), 0))
	require.NoError(t, cudatest.Fill(0, 1, 0))
}

func TestFailuresSayWhatWasCopied(t *testing.T) {
	// Without cuInit every driver call fails (not initialized, or no libcuda, or no cgo).
	err := cudatest.Upload(0, []uint32{1, 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cuMemcpyHtoD of 8 bytes")
	err = cudatest.Download(make([]uint16, 3), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "6 bytes")
	err = cudatest.Fill(0, 1, 4)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cuMemsetD8 of 4 bytes")
	assert.ErrorContains(t, cudatest.Fill(0, 1, -1), "fill of -1 bytes: the size is negative")
}
