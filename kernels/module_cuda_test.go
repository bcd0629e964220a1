//go:build cgo && !gpu

package kernels

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
)

// cachedLibCUDA returns the libcuda that make libs caches, skipping t when
// it is absent.
func cachedLibCUDA(t *testing.T) string {
	t.Helper()
	root := os.Getenv("NCCLGO_CACHE")
	if root == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		root = filepath.Join(home, ".cache", "ncclgo")
	}
	p := filepath.Join(root, "lib", "cuda-535.261.03", "libcuda.so.1")
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("%s is not cached: run make libs (NCCLGO_STRICT is set: a missing library fails)", p)
		}
		t.Skipf("%s is not cached: run make libs", p)
	}
	return p
}

// TestLoadReportsTheDriverErrorWithoutAGPU goes through raw/cuda into the
// real driver library on a machine without a GPU: Load must return the
// driver's CUresult, wrapped, and no Module.
func TestLoadReportsTheDriverErrorWithoutAGPU(t *testing.T) {
	lib := cachedLibCUDA(t)
	if err := cuda.SetLibraryPath(lib); err != nil && !errors.Is(err, cuda.ErrAlreadyLoaded) {
		require.NoError(t, err)
	}
	if err := cuda.Init(0); err == nil {
		t.Skip("this machine has a GPU: the gpu-tagged tests cover Load")
	} else {
		require.ErrorIs(t, err, cuda.ErrorNoDevice)
	}
	m, err := Load()
	require.Error(t, err)
	assert.Nil(t, m)
	var r cuda.Result
	require.ErrorAs(t, err, &r, "the driver's CUresult stays reachable")
	assert.NotEqual(t, cuda.Result(0), r)
	assert.Contains(t, err.Error(), "load add kernels")
}
