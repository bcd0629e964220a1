package dltest

import (
	"os"
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
