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

// configMain prints the bytes of NCCL_CONFIG_INITIALIZER as hex. The config is static so
// that any padding is zero, as in Go.
const configMain = `
#include <stdio.h>
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

// gccBytes compiles src (with the stub headers and include on the include path) with
// gcc, runs it and returns the bytes it prints in hex.
func gccBytes(t *testing.T, src string, include ...string) []byte {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		dltest.Missing(t, "gcc not found: this test compiles NCCL_CONFIG_INITIALIZER (apt-get install gcc)")
	}
	dir := t.TempDir()
	for name, text := range stubHeaders {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	file := filepath.Join(dir, "config.c")
	require.NoError(t, os.WriteFile(file, []byte(src), 0o644))
	bin := filepath.Join(dir, "config")
	args := []string{"-std=c11", "-Wall", "-Werror", "-I", dir}
	for _, inc := range include {
		args = append(args, "-I", inc)
	}
	out, err := exec.Command(gcc, append(args, "-o", bin, file)...).CombinedOutput()
	require.NoError(t, err, "gcc: %s\n%s", out, src)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(out)))
	require.NoError(t, err)
	return b
}

// headerInitializer is what gcc makes of NCCL_CONFIG_INITIALIZER in the real nccl.h of
// a cached header set (folder dir).
func headerInitializer(t *testing.T, dir string) []byte {
	t.Helper()
	return gccBytes(t, "#include <nccl.h>\n"+configMain, dir)
}

// snapshotInitializer is what gcc makes of NCCL_CONFIG_INITIALIZER rebuilt from the
// committed snapshot of set: ncclConfig_t with the snapshot's members and layout, and
// the macro definitions the snapshot records (gen/nccl.json's macroDefinitions). It
// needs no header, so it runs everywhere.
func snapshotInitializer(t *testing.T, set string) []byte {
	t.Helper()
	return gccBytes(t, dltest.SnapshotC(t, set, "ncclConfig_t")+configMain)
}

// newConfigBytes are the bytes of nccl.NewConfig().
func newConfigBytes() []byte {
	c := nccl.NewConfig()
	return unsafe.Slice((*byte)(unsafe.Pointer(&c)), unsafe.Sizeof(c))
}

// TestNewConfigEqualsConfigInitializer compares NewConfig byte for byte with what gcc
// makes of NCCL_CONFIG_INITIALIZER of the newest pinned header, the one the package is
// generated from: rebuilt from its committed snapshot on every machine (that header
// comes from GitHub, which CI cannot reach), and from the header itself where it is
// cached.
func TestNewConfigEqualsConfigInitializer(t *testing.T) {
	set := dltest.NewestHeader(t, "nccl-")
	got := newConfigBytes()
	want := snapshotInitializer(t, set)
	require.Len(t, got, len(want), "sizeof(ncclConfig_t)")
	assert.Equal(t, hex.EncodeToString(want), hex.EncodeToString(got), "NCCL_CONFIG_INITIALIZER of %s (from its snapshot) vs NewConfig", set)

	t.Run("header", func(t *testing.T) {
		dir, ok := dltest.OptionalHeader(t, set, "nccl.h")
		if !ok {
			t.Skipf("nccl.h %s is not cached (only hosts CI cannot reach serve it): checked from its committed snapshot above", set)
		}
		assert.Equal(t, hex.EncodeToString(headerInitializer(t, dir)), hex.EncodeToString(got), "NCCL_CONFIG_INITIALIZER of %s (from nccl.h) vs NewConfig", set)
	})
}

// TestSnapshotRebuildsConfigInitializer checks the stand-in against the real thing: for
// every pinned nccl.h that is cached (on CI Debian's, 2.22.3 and 2.29.7; every one on a
// maintainer's machine), NCCL_CONFIG_INITIALIZER rebuilt from the set's committed
// snapshot gives the bytes the header gives. So the committed data holds all the
// initializer is made of, and the check above is a check against nccl.h.
func TestSnapshotRebuildsConfigInitializer(t *testing.T) {
	var checked []string
	for _, set := range dltest.PinnedSets(t, "header", "nccl-") {
		dir, ok := dltest.OptionalHeader(t, set, "nccl.h")
		if !ok {
			continue
		}
		want := headerInitializer(t, dir)
		assert.Equal(t, hex.EncodeToString(want), hex.EncodeToString(snapshotInitializer(t, set)), "%s: snapshot vs nccl.h", set)
		checked = append(checked, set)
	}
	if len(checked) == 0 {
		dltest.Missing(t, "no pinned nccl.h is cached: run make headers")
	}
	t.Logf("checked against nccl.h: %s", strings.Join(checked, " "))
}

func TestNewConfigFields(t *testing.T) {
	c := nccl.NewConfig()
	assert.EqualValues(t, unsafe.Sizeof(c), c.Size)
	assert.EqualValues(t, 0xcafebeef, c.Magic)
	assert.EqualValues(t, nccl.VersionCode, c.Version)
	assert.EqualValues(t, nccl.ConfigUndefInt, c.Blocking)
}
