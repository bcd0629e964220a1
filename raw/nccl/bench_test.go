//go:build cgo

package nccl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/cbench"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
)

// loadForBench loads the cached libnccl 2.29.7 in this process and returns the address
// of ncclGetVersion.
func loadForBench(tb testing.TB) uintptr {
	tb.Helper()
	if err := SetLibraryPath(dltest.Lib(tb, dltest.NCCL2297)); err != nil && !errors.Is(err, ErrAlreadyLoaded) {
		tb.Fatal(err)
	}
	fp, err := lib.Resolve(&_sym_ncclGetVersion)
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
	require.NoError(t, GetVersion(&v))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = GetVersion(&v) }), "GetVersion")
	var id UniqueId
	require.NoError(t, GetUniqueId(&id))
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = GetUniqueId(&id) }), "GetUniqueId")
}

// BenchmarkGetVersion compares a raw call (nccl.GetVersion: resolve, trampoline, result
// check) with a bare cgo call to the same function pointer (cbench), in the same run
// (see dltest.Compare), and reports each one's ns/op and their ratio.
func BenchmarkGetVersion(b *testing.B) {
	fp := loadForBench(b)
	var v int32
	rawLoop := func(n int) {
		for range n {
			_ = GetVersion(&v)
		}
	}
	bareLoop := func(n int) {
		for range n {
			_ = cbench.CallIntPtr(fp, &v)
		}
	}
	b.ReportAllocs()
	dltest.Compare(b, "raw", "cgo", rawLoop, bareLoop)
	if v != 22907 {
		b.Fatalf("ncclGetVersion gave %d, want 22907", v)
	}
}
