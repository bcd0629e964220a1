//go:build cgo

package nccl_test

import (
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// configProgram prints the bytes of NCCL_CONFIG_INITIALIZER as hex. The config is static
// so that any padding is zero, as in Go.
const configProgram = `#include <stdio.h>
#include <nccl.h>
static ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
int main(void) {
	const unsigned char *p = (const unsigned char *)&c;
	for (size_t i = 0; i < sizeof c; i++) printf("%02x", p[i]);
	printf("\n");
	return 0;
}
`

// stubHeaders stand in for the CUDA runtime headers nccl.h includes: in C it needs only
// cudaStream_t and CUDART_VERSION from them.
var stubHeaders = map[string]string{
	"cuda_runtime.h": "#include <stddef.h>\n#define CUDART_VERSION 12040\ntypedef struct CUstream_st *cudaStream_t;\n",
	"cuda_fp16.h":    "",
	"cuda_bf16.h":    "",
	"cuda_fp8.h":     "",
}

// gccInitializer compiles configProgram against the cached nccl.h of set and returns
// the bytes it prints.
func gccInitializer(t *testing.T, set string) []byte {
	t.Helper()
	include := dltest.Header(t, set, "nccl.h")
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		dltest.Missing(t, "gcc not found: this test compiles NCCL_CONFIG_INITIALIZER (apt-get install gcc)")
	}
	dir := t.TempDir()
	for name, text := range stubHeaders {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	src := filepath.Join(dir, "config.c")
	require.NoError(t, os.WriteFile(src, []byte(configProgram), 0o644))
	bin := filepath.Join(dir, "config")
	out, err := exec.Command(gcc, "-std=c11", "-I", dir, "-I", include, "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "gcc: %s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	return b
}

func TestNewConfigEqualsConfigInitializer(t *testing.T) {
	// The header the package is generated from: the newest pinned one.
	want := gccInitializer(t, dltest.NewestHeader(t, "nccl-"))
	c := nccl.NewConfig()
	got := unsafe.Slice((*byte)(unsafe.Pointer(&c)), unsafe.Sizeof(c))
	require.Len(t, got, len(want), "sizeof(ncclConfig_t)")
	assert.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got))
}

func TestNewConfigFields(t *testing.T) {
	c := nccl.NewConfig()
	assert.EqualValues(t, unsafe.Sizeof(c), c.Size)
	assert.EqualValues(t, 0xcafebeef, c.Magic)
	assert.EqualValues(t, nccl.VersionCode, c.Version)
	assert.EqualValues(t, nccl.ConfigUndefInt, c.Blocking)
}
