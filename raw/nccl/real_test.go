//go:build cgo

package nccl_test

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// exportedSymbols reads the dynamic symbol table of the library file: what dlsym can find,
// read independently of the loader.
func exportedSymbols(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	out := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			out[s.Name] = true
		}
	}
	return out
}

// versionCode is the NCCL version code of "2.29.7".
func versionCode(t *testing.T, v string) int {
	t.Helper()
	var major, minor, patch int
	_, err := fmt.Sscanf(v, "%d.%d.%d", &major, &minor, &patch)
	require.NoError(t, err, "version %q", v)
	return nccl.Version(major, minor, patch)
}

// runOnRealLibraries runs test in a child per library headers/manifest.tsv pins, with
// NCCLGO_LIBNCCL set and NCCLGO_TEST_VERSION / NCCLGO_TEST_CODE saying what to expect.
func runOnRealLibraries(t *testing.T, test string) {
	for _, set := range dltest.PinnedSets(t, "lib", "nccl-") {
		version := dltest.SetVersion(set)
		t.Run(set, func(t *testing.T) {
			dltest.RunChild(t, test, append(cleanEnv(),
				"NCCLGO_LIBNCCL="+dltest.Lib(t, set),
				"NCCLGO_TEST_VERSION="+version,
				"NCCLGO_TEST_CODE="+strconv.Itoa(versionCode(t, version)))...)
		})
	}
}

func TestSymbolsResolveExactlyWhenTheLibraryHasThem(t *testing.T) {
	if !dltest.InChild() {
		runOnRealLibraries(t, "TestSymbolsResolveExactlyWhenTheLibraryHasThem")
		return
	}
	version := os.Getenv("NCCLGO_TEST_VERSION")
	code := versionCode(t, version)
	path := os.Getenv("NCCLGO_LIBNCCL")
	exported := exportedSymbols(t, path)
	require.NotEmpty(t, nccl.ExportSymbols)

	var resolved, missing int
	for _, sym := range nccl.ExportSymbols {
		p, err := nccl.ExportResolve(sym)
		// What the header history says: a symbol first declared by a header no newer
		// than the library is there, and one first declared later is not.
		declared := versionCode(t, sym.Since) <= code
		assert.Equal(t, declared, err == nil, "%s (since %s) in NCCL %s: %v", sym.Name, sym.Since, version, err)
		// What the file says, read without the loader.
		assert.Equal(t, exported[sym.Name], err == nil, "%s: dlsym and the ELF symbol table disagree", sym.Name)
		if err == nil {
			assert.NotZero(t, p)
			resolved++
			continue
		}
		missing++
		require.ErrorIs(t, err, nccl.ErrSymbolNotFound, sym.Name)
		var se *nccl.SymbolError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "symbol "+sym.Name+" not found in "+path+" (NCCL "+version+"): needs NCCL ≥ "+sym.Since, err.Error())
	}
	t.Logf("NCCL %s: %d functions resolve, %d are missing", version, resolved, missing)

	// Coverage (what tools/ncclinfo shows) agrees with the symbol-by-symbol view.
	cov, err := nccl.Coverage()
	require.NoError(t, err)
	require.Len(t, cov, len(nccl.ExportSymbols))
	var present int
	for _, c := range cov {
		assert.Equal(t, exported[c.Symbol], c.Present, c.Symbol)
		if c.Present {
			present++
		}
	}
	assert.Equal(t, resolved, present)
	newest := dltest.SetVersion(dltest.NewestHeader(t, "nccl-"))
	if version == newest {
		assert.Zero(t, missing, "every function of nccl.h %s resolves in libnccl %s", newest, version)
	} else {
		assert.NotZero(t, missing, "nccl.h %s declares functions that libnccl %s lacks", newest, version)
	}
}

func TestCallsIntoRealLibrary(t *testing.T) {
	if !dltest.InChild() {
		runOnRealLibraries(t, "TestCallsIntoRealLibrary")
		return
	}
	version := os.Getenv("NCCLGO_TEST_VERSION")
	code, err := strconv.Atoi(os.Getenv("NCCLGO_TEST_CODE"))
	require.NoError(t, err)

	t.Run("GetVersion", func(t *testing.T) {
		var v int32
		require.NoError(t, nccl.GetVersion(&v))
		assert.EqualValues(t, code, v)
	})

	var id nccl.UniqueId
	t.Run("GetUniqueId", func(t *testing.T) {
		require.NoError(t, nccl.GetUniqueId(&id))
		assert.NotEqual(t, nccl.UniqueId{}, id, "the id is filled in")
	})

	t.Run("CommInitRank without a GPU", func(t *testing.T) {
		var comm nccl.Comm
		err := nccl.CommInitRank(&comm, 1, id, 0)
		require.Error(t, err)
		assert.Zero(t, comm)

		assert.ErrorIs(t, err, nccl.UnhandledCudaError)
		assert.False(t, errors.Is(err, nccl.InvalidArgument))
		var res nccl.Result
		require.ErrorAs(t, err, &res)
		assert.Equal(t, nccl.UnhandledCudaError, res)
		var ne *nccl.Error
		require.ErrorAs(t, err, &ne)
		assert.NotEmpty(t, ne.Detail, "ncclGetLastError's text is kept")
		assert.Contains(t, err.Error(), ne.Detail)
		libText, lerr := nccl.GetErrorString(nccl.UnhandledCudaError)
		require.NoError(t, lerr)
		assert.Equal(t, "nccl: "+libText+": "+ne.Detail, err.Error())
		t.Logf("NCCL %s says: %v", version, err)
	})

	t.Run("Result messages come from the library", func(t *testing.T) {
		for _, r := range []nccl.Result{nccl.InvalidArgument, nccl.InvalidUsage, nccl.SystemError} {
			libText, err := nccl.GetErrorString(r)
			require.NoError(t, err)
			require.NotEmpty(t, libText)
			assert.Equal(t, "nccl: "+libText, r.Error())
		}
	})

	t.Run("a function newer than the library", func(t *testing.T) {
		err := nccl.AlltoAll(nil, nil, 0, nccl.Float32, 0, 0)
		since := ""
		for _, s := range nccl.ExportSymbols {
			if s.Name == "ncclAlltoAll" {
				since = s.Since
			}
		}
		require.NotEmpty(t, since, "ncclAlltoAll is in the symbol table")
		if versionCode(t, since) <= code {
			// Present: NCCL itself rejects the null communicator.
			assert.ErrorIs(t, err, nccl.InvalidArgument)
			return
		}
		require.ErrorIs(t, err, nccl.ErrSymbolNotFound)
		assert.Contains(t, err.Error(), "needs NCCL ≥ "+since)
	})
}
