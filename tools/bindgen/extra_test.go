package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// extraSetup adds extraHeaders to the fake config: our prelude (inc/prelude.h) and the
// set's sub/dev.h, which only fake-1.0 has and the manifest pins only for fake-1.0.
func extraSetup(t *testing.T) (cfg *Config, root, cache string) {
	t.Helper()
	cfg, root, cache = fakeSetup(t, "", Skip{Kind: "type", Match: "^struct fakeHidden$", Reason: "device members"})
	require.NoError(t, os.MkdirAll(filepath.Join(root, "inc"), 0o755))
	require.NoError(t, writeFile(filepath.Join(root, "inc", "prelude.h"), "#define FAKE_ARG int\n"))
	dev := filepath.Join(cache, "header", "fake-1.0", "sub", "dev.h")
	require.NoError(t, os.MkdirAll(filepath.Dir(dev), 0o755))
	require.NoError(t, writeFile(dev, "#include <fake.h>\n"+
		"typedef struct fakeTeam { int nRanks, rank; } fakeTeam_t;\n"+
		"fakeTeam_t fakeTeamWorld(FAKE_ARG comm);\n"+
		"inline __attribute__((always_inline)) int fakeTeamInlineOnly(fakeTeam_t t);\n"+
		"struct fakeHidden { int a; };\n"+
		"typedef struct fakeHidden *fakeHidden_t;\n"+
		"int fakeHiddenUse(fakeHidden_t h);\n"+
		"struct fakeWinS { int a; };\n"+
		"typedef struct fakeWinS *fakeWin_t;\n"+
		"typedef struct fakeWinS *fakeWinPtr_t;\n"+
		"int fakeWinUse(fakeWin_t w, fakeWinPtr_t p);\n"))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "headers"), 0o755))
	require.NoError(t, writeFile(filepath.Join(root, "headers", "manifest.tsv"),
		"header\tfake-0.9\tlibfake-dev\tsid\tmain\t0.9\tusr/include/fake.h\t"+zeros+"\n"+
			"header\tfake-1.0\tlibfake-dev\tsid\tmain\t1.0\tusr/include/fake.h\t"+zeros+"\n"+
			"header\tfake-1.0\tlibfake-dev\tsid\tmain\t1.0\tusr/include/sub/dev.h\t"+zeros+"\n"))
	cfg.Include = []string{"inc"}
	cfg.ExtraHeaders = []string{"prelude.h", "sub/dev.h"}
	cfg.Handles = []Handle{{C: "fakeWin_t", Reason: "members for device code"}}
	return cfg, root, cache
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

// The host declarations of a set's extra headers are bound like the header's: a struct
// result by value, a skipped struct left opaque, inline declarations left out, and each
// typedef that handles names stays a handle, and each function's Since from the first set whose manifest pins the header declaring it.
func TestExtraHeadersAreBoundWhereTheManifestPinsThem(t *testing.T) {
	cfg, root, cache := extraSetup(t)
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, root)
	funcs := files[filepath.Join("raw", "fake", "zfuncs_cgo.go")]
	assert.Contains(t, funcs, "func TeamWorld(comm int32) (r Team, err error) {")
	assert.Contains(t, funcs, "return *(*Team)(unsafe.Pointer(&c)), nil")
	assert.Contains(t, funcs, "First pinned header declaring it: 1.0.")
	assert.Contains(t, funcs, "func HiddenUse(h Hidden) (r int32, err error) {")
	assert.NotContains(t, funcs, "InlineOnly")
	types := files[filepath.Join("raw", "fake", "ztypes.go")]
	assert.Contains(t, types, "type Hidden uintptr")
	assert.Contains(t, types, "type Win uintptr", "handles keeps fakeWin_t a handle")
	assert.Contains(t, types, "type WinPtr *WinS", "without handles a pointer to a defined struct is a Go pointer")
	assert.Contains(t, files[filepath.Join("raw", "fake", "zlayout_test.go")], "#include <fake.h>\n#include <prelude.h>\n#include <sub/dev.h>\n")
	assert.Contains(t, files[filepath.Join("gen", "snapshot", "fake-1.0.txt")], "fakeTeamWorld")
	assert.NotContains(t, files[filepath.Join("gen", "snapshot", "fake-0.9.txt")], "fakeTeamWorld")
}

// A set whose manifest pins an extra header that the cache lacks is not cached: it is
// read from its committed snapshot, never parsed without the header.
func TestPinnedExtraHeaderMissingFromTheCacheIsNotCached(t *testing.T) {
	cfg, root, cache := extraSetup(t)
	require.NoError(t, os.Remove(filepath.Join(cache, "header", "fake-1.0", "sub", "dev.h")))
	_, err := parseSet(cfg, root, cache, "fake-1.0")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrNoHeaders), "%v", err)
	assert.Contains(t, err.Error(), "sub/dev.h")
	api, err := parseSet(cfg, root, cache, "fake-0.9")
	require.NoError(t, err)
	assert.Empty(t, api.Extra, "fake-0.9 pins no extra header: not even the prelude is included")
}
