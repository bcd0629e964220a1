package nccl_test

import (
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// notInLinuxHeaders are functions libnccl 2.29.7 exports that no public Linux header of
// NCCL declares in C: NCCL declares them in its internal src/device/symmetric/gin_scratch.h
// and, from 2.30.3, in nccl_device/gin_win_stub.h, which refuses to compile outside
// Windows; their parameters are C++ (ncclTeam, ncclDevResourceRequirements without struct).
var notInLinuxHeaders = map[string]bool{
	"ncclGinInboxA2ACreateRequirement": true,
	"ncclGinOutboxCreateRequirement":   true,
}

// TestEveryExportedFunctionIsBound compares the dynamic symbols libnccl 2.29.7 defines
// (nm -D --defined-only; NCCL exports nccl* as weak aliases of pnccl*) with raw/nccl:
// every exported nccl* function but the *Internal ones has its Go function. Under
// NCCLGO_STRICT a missing library or nm fails the test instead of skipping it.
func TestEveryExportedFunctionIsBound(t *testing.T) {
	lib := dltest.Lib(t, dltest.NCCL2297)
	nm, err := exec.LookPath("nm")
	if err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("nm (binutils) is not installed: %v", err)
		}
		t.Skipf("nm (binutils) is not installed: %v", err)
	}
	out, err := exec.Command(nm, "-D", "--defined-only", lib).Output()
	require.NoError(t, err, "nm -D --defined-only %s", lib)
	bound := map[string]bool{}
	for _, s := range nccl.ExportSymbols {
		bound[s.Name] = true
	}
	var exported, missing []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || !strings.Contains("TWi", f[1]) || !strings.HasPrefix(f[2], "nccl") || strings.HasSuffix(f[2], "Internal") {
			continue
		}
		exported = append(exported, f[2])
		if !bound[f[2]] && !notInLinuxHeaders[f[2]] {
			missing = append(missing, f[2])
		}
	}
	sort.Strings(missing)
	require.NotEmpty(t, exported, "nm listed no nccl* function in %s", lib)
	assert.Empty(t, missing, "exported by %s but without a function in raw/nccl", lib)
	for name := range notInLinuxHeaders {
		assert.Contains(t, exported, name, "%s is no longer exported: drop it from notInLinuxHeaders", name)
		assert.False(t, bound[name], "%s is bound now: drop it from notInLinuxHeaders", name)
	}
}
