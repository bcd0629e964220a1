//go:build cgo

package cuda_test

import (
	"debug/elf"
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
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

// runOnRealDriver runs test in a child with NCCLGO_LIBCUDA set to the cached driver 535.
func runOnRealDriver(t *testing.T, test string) {
	dltest.RunChild(t, test, append(cleanEnv(), "NCCLGO_LIBCUDA="+dltest.Lib(t, dltest.CUDA535))...)
}

// newerThanDriver535 are functions of cuda.h 12.4.1 that CUDA 12.3 and 12.4 added, so
// driver 535 (CUDA 12.2) lacks them.
var newerThanDriver535 = []string{
	"cuGreenCtxCreate",                  // 12.4: green contexts
	"cuDevSmResourceSplitByCount",       // 12.4
	"cuGraphConditionalHandleCreate",    // 12.3: conditional graph nodes
	"cuStreamBeginCaptureToGraph",       // 12.3
	"cuStreamGetCaptureInfo_v3",         // 12.3
	"cuFuncGetName",                     // 12.3
	"cuDeviceRegisterAsyncNotification", // 12.4
}

func TestSymbolsResolveExactlyWhenTheDriverHasThem(t *testing.T) {
	if !dltest.InChild() {
		runOnRealDriver(t, "TestSymbolsResolveExactlyWhenTheDriverHasThem")
		return
	}
	path := os.Getenv("NCCLGO_LIBCUDA")
	exported := exportedSymbols(t, path)
	require.NotEmpty(t, cuda.ExportSymbols)

	var missing []string
	for _, sym := range cuda.ExportSymbols {
		p, err := cuda.ExportResolve(sym)
		assert.Equal(t, exported[sym.Name], err == nil, "%s: dlsym and the ELF symbol table disagree: %v", sym.Name, err)
		if err == nil {
			assert.NotZero(t, p)
			continue
		}
		missing = append(missing, sym.Name)
		require.ErrorIs(t, err, cuda.ErrSymbolNotFound, sym.Name)
		var se *cuda.SymbolError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, "symbol "+sym.Name+" not found in "+path+": not in this driver (CUDA 12.2); declared by cuda.h 12.4.1", err.Error())
	}
	sort.Strings(missing)
	t.Logf("driver 535: %d of %d functions resolve; missing: %v", len(cuda.ExportSymbols)-len(missing), len(cuda.ExportSymbols), missing)
	for _, name := range newerThanDriver535 {
		assert.Contains(t, missing, name)
	}
}

func TestCallsIntoRealDriver(t *testing.T) {
	if !dltest.InChild() {
		runOnRealDriver(t, "TestCallsIntoRealDriver")
		return
	}
	t.Run("DriverGetVersion", func(t *testing.T) {
		var v int32
		require.NoError(t, cuda.DriverGetVersion(&v))
		assert.EqualValues(t, 12020, v)
	})
	t.Run("Init without a GPU", func(t *testing.T) {
		err := cuda.Init(0)
		require.ErrorIs(t, err, cuda.ErrorNoDevice)
		var r cuda.Result
		require.ErrorAs(t, err, &r)
		assert.Equal(t, cuda.ErrorNoDevice, r)
		assert.Equal(t, "cuda: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", err.Error())
	})
	t.Run("Result messages come from the driver", func(t *testing.T) {
		tests := []struct {
			r    cuda.Result
			want string
		}{
			{cuda.ErrorInvalidValue, "cuda: CUDA_ERROR_INVALID_VALUE: invalid argument"},
			{cuda.ErrorOutOfMemory, "cuda: CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
			{cuda.ErrorNotInitialized, "cuda: CUDA_ERROR_NOT_INITIALIZED: initialization error"},
			{cuda.Result(12345), "cuda: CUresult 12345"}, // unknown to the driver
		}
		for _, tc := range tests {
			assert.Equal(t, tc.want, tc.r.Error())
		}
	})
	t.Run("a function newer than the driver", func(t *testing.T) {
		var h cuda.GraphConditionalHandle
		err := cuda.GraphConditionalHandleCreate(&h, 0, 0, 0, 0)
		require.ErrorIs(t, err, cuda.ErrSymbolNotFound)
		assert.Contains(t, err.Error(), "not in this driver (CUDA 12.2); declared by cuda.h 12.4.1")
	})
}
