package dltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunChildPassesEnvironment(t *testing.T) {
	if InChild() {
		require.Equal(t, "42", os.Getenv("NCCLGO_DLTEST_VALUE"))
		return
	}
	require.Empty(t, os.Getenv("NCCLGO_DLTEST_VALUE"))
	RunChild(t, "TestRunChildPassesEnvironment", "NCCLGO_DLTEST_VALUE=42")
}

func TestCacheDirFollowsFetchScript(t *testing.T) {
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	tests := []struct {
		name, cache, xdg, want string
	}{
		{"NCCLGO_CACHE wins", "/c", "/x", "/c"},
		{"XDG_CACHE_HOME next", "", "/x", "/x/ncclgo"},
		{"home last", "", "", filepath.Join(home, ".cache/ncclgo")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NCCLGO_CACHE", tc.cache)
			t.Setenv("XDG_CACHE_HOME", tc.xdg)
			assert.Equal(t, tc.want, CacheDir())
		})
	}
}

// TestMissingFailsUnderStrict runs a test that needs an uncached library in a child
// process, with and without NCCLGO_STRICT: it skips, or fails with the same message.
func TestMissingFailsUnderStrict(t *testing.T) {
	if os.Getenv("NCCLGO_DLTEST_MISSING") != "" {
		Lib(t, NCCL2297)
		t.Fatal("Lib returned for a library that is not cached")
	}
	for _, strict := range []string{"", "1"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingFailsUnderStrict$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "NCCLGO_DLTEST_MISSING=1", "NCCLGO_CACHE="+t.TempDir(), StrictEnv+"="+strict)
		out, err := cmd.CombinedOutput()
		assert.Contains(t, string(out), "libnccl.so.2 is not cached", "strict=%q", strict)
		assert.Contains(t, string(out), "run make libs")
		if strict == "" {
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- SKIP: TestMissingFailsUnderStrict")
		} else {
			require.Error(t, err, "%s", out)
			assert.Contains(t, string(out), "--- FAIL: TestMissingFailsUnderStrict")
			assert.Contains(t, string(out), "NCCLGO_STRICT is set")
		}
	}
}
