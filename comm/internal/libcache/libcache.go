// Package libcache points comm's tests and benchmarks at the real NVIDIA libraries that
// `make libs` (headers/fetch.sh) caches outside the repository, and skips a test when
// they are absent (fails it when $NCCLGO_STRICT is set).
package libcache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// The cached sets comm's tests load.
const (
	NCCL = "nccl-2.29.7"
	CUDA = "cuda-535.261.03"
)

// Dir is the cache root: $NCCLGO_CACHE, else $XDG_CACHE_HOME/ncclgo, else ~/.cache/ncclgo.
func Dir() string {
	if d := os.Getenv("NCCLGO_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ncclgo")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "ncclgo")
	}
	return filepath.Join(home, ".cache", "ncclgo")
}

// Load makes raw/nccl and raw/cuda load the cached libnccl 2.29.7 and libcuda, skipping
// tb when they are not cached (failing it when $NCCLGO_STRICT is set, as make test does). Later calls in the same process are no-ops.
func Load(tb testing.TB) {
	tb.Helper()
	libs := []struct {
		path string
		set  func(string) error
		done error
	}{
		{filepath.Join(Dir(), "lib", NCCL, "libnccl.so.2"), nccl.SetLibraryPath, nccl.ErrAlreadyLoaded},
		{filepath.Join(Dir(), "lib", CUDA, "libcuda.so.1"), cuda.SetLibraryPath, cuda.ErrAlreadyLoaded},
	}
	for _, l := range libs {
		if _, err := os.Stat(l.path); err != nil {
			if os.Getenv("NCCLGO_STRICT") != "" {
				tb.Fatalf("%s is not cached (%v): run make libs (NCCLGO_STRICT is set: a missing library fails)", l.path, err)
			}
			tb.Skipf("%s is not cached (%v): run make libs", l.path, err)
		}
		if err := l.set(l.path); err != nil && !errors.Is(err, l.done) {
			tb.Fatalf("load %s: %v", l.path, err)
		}
	}
}
