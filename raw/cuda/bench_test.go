//go:build cgo

package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/cbench"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
)

// loadForBench loads the cached driver 535 in this process and returns the address of
// cuDriverGetVersion.
func loadForBench(tb testing.TB) uintptr {
	tb.Helper()
	if err := SetLibraryPath(dltest.Lib(tb, dltest.CUDA535)); err != nil && !errors.Is(err, ErrAlreadyLoaded) {
		tb.Fatal(err)
	}
	fp, err := lib.Resolve(&_sym_cuDriverGetVersion)
	require.NoError(tb, err)
	return fp
}

func TestRawCallDoesNotAllocate(t *testing.T) {
	if !dltest.InChild() {
		dltest.RunChild(t, "TestRawCallDoesNotAllocate")
		return
	}
	loadForBench(t)
	var v int32
	require.NoError(t, DriverGetVersion(&v))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = DriverGetVersion(&v) }), "DriverGetVersion")
	var count int32
	require.ErrorIs(t, DeviceGetCount(&count), ErrorNotInitialized)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = DeviceGetCount(&count) }), "an error result below 256")
}

// BenchmarkDriverGetVersion compares a raw call (cuda.DriverGetVersion: resolve,
// trampoline, result check) with a bare cgo call to the same function pointer (cbench) in
// the same run (see dltest.Compare), and reports each one's ns/op and their ratio.
func BenchmarkDriverGetVersion(b *testing.B) {
	fp := loadForBench(b)
	var v int32
	rawLoop := func(n int) {
		for range n {
			_ = DriverGetVersion(&v)
		}
	}
	bareLoop := func(n int) {
		for range n {
			_ = cbench.CallIntPtr(fp, &v)
		}
	}
	b.ReportAllocs()
	dltest.Compare(b, "raw", "cgo", rawLoop, bareLoop)
	if v != 12020 {
		b.Fatalf("cuDriverGetVersion gave %d, want 12020", v)
	}
}
