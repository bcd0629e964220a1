//go:build cgo

package nccl_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Each test below runs its checks in a fresh process (dltest.RunChild): a process loads
// libnccl once. The parent picks the cached library and passes what to expect in the
// environment.

func TestLoadedVersionOfRealLibraries(t *testing.T) {
	if dltest.InChild() {
		want, err := strconv.Atoi(os.Getenv("NCCLGO_TEST_WANT_CODE"))
		require.NoError(t, err)
		code, err := nccl.LoadedVersion()
		require.NoError(t, err)
		assert.Equal(t, want, code)

		info := nccl.LibraryInfo()
		require.NoError(t, info.Err)
		assert.Equal(t, os.Getenv("NCCLGO_LIBNCCL"), info.Path)
		assert.Equal(t, "NCCLGO_LIBNCCL", info.Source)
		assert.Equal(t, "NCCL "+os.Getenv("NCCLGO_TEST_WANT_VERSION"), info.Version)
		assert.Equal(t, want, info.VersionCode)
		require.Len(t, info.Attempts, 1)
		assert.NoError(t, info.Attempts[0].Err)
		return
	}
	tests := []struct {
		set     string
		version string
		code    int
	}{
		{dltest.NCCL2297, "2.29.7", 22907},
		{dltest.NCCL2223, "2.22.3", 22203},
	}
	for _, tc := range tests {
		t.Run(tc.set, func(t *testing.T) {
			dltest.RunChild(t, "TestLoadedVersionOfRealLibraries",
				"NCCLGO_LIBNCCL="+dltest.Lib(t, tc.set),
				"NCCLGO_TEST_WANT_CODE="+strconv.Itoa(tc.code),
				"NCCLGO_TEST_WANT_VERSION="+tc.version)
		})
	}
}

// linkLib makes dir/libnccl.so.2 (and the glibc shim next to it) point at the cached
// library, as a pip wheel or an installation would hold it.
func linkLib(t *testing.T, lib, dir string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	entries, err := os.ReadDir(filepath.Dir(lib))
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) != "" && e.Name() != ".verified" {
			require.NoError(t, os.Symlink(filepath.Join(filepath.Dir(lib), e.Name()), filepath.Join(dir, e.Name())))
		}
	}
	return filepath.Join(dir, "libnccl.so.2")
}

func TestLoadSearchFindsRealLibrary(t *testing.T) {
	if dltest.InChild() {
		if p := os.Getenv("NCCLGO_TEST_SETPATH"); p != "" {
			require.NoError(t, nccl.SetLibraryPath(p))
		}
		code, err := nccl.LoadedVersion()
		require.NoError(t, err)
		assert.Equal(t, 22907, code)
		info := nccl.LibraryInfo()
		assert.Equal(t, os.Getenv("NCCLGO_TEST_WANT_PATH"), info.Path)
		assert.Equal(t, os.Getenv("NCCLGO_TEST_WANT_SOURCE"), info.Source)

		err = nccl.SetLibraryPath("/elsewhere/libnccl.so.2")
		require.ErrorIs(t, err, nccl.ErrAlreadyLoaded)
		assert.Contains(t, err.Error(), info.Path)
		return
	}
	lib := dltest.Lib(t, dltest.NCCL2297)
	tests := []struct {
		name string
		env  func(t *testing.T) (env []string, wantPath, wantSource string)
	}{
		{"soname through LD_LIBRARY_PATH", func(t *testing.T) ([]string, string, string) {
			dir := filepath.Join(t.TempDir(), "lib")
			p := linkLib(t, lib, dir)
			return []string{"LD_LIBRARY_PATH=" + dir}, p, "soname"
		}},
		{"virtualenv wheel", func(t *testing.T) ([]string, string, string) {
			venv := t.TempDir()
			p := linkLib(t, lib, filepath.Join(venv, "lib/python3.12/site-packages/nvidia/nccl/lib"))
			return []string{"VIRTUAL_ENV=" + venv}, p, "VIRTUAL_ENV"
		}},
		{"NCCL_HOME", func(t *testing.T) ([]string, string, string) {
			home := t.TempDir()
			p := linkLib(t, lib, filepath.Join(home, "lib"))
			return []string{"NCCL_HOME=" + home}, p, "NCCL_HOME"
		}},
		{"SetLibraryPath ahead of NCCLGO_LIBNCCL", func(*testing.T) ([]string, string, string) {
			return []string{"NCCLGO_TEST_SETPATH=" + lib, "NCCLGO_LIBNCCL=/nonexistent/libnccl.so.2"}, lib, "SetLibraryPath"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, wantPath, wantSource := tc.env(t)
			env = append(env, "NCCLGO_TEST_WANT_PATH="+wantPath, "NCCLGO_TEST_WANT_SOURCE="+wantSource)
			dltest.RunChild(t, "TestLoadSearchFindsRealLibrary", append(cleanEnv(), env...)...)
		})
	}
}

// cleanEnv empties the variables the search reads, so the machine's setup does not leak
// into a child (later entries of a child's environment win).
func cleanEnv() []string {
	return []string{"NCCLGO_LIBNCCL=", "VIRTUAL_ENV=", "CONDA_PREFIX=", "NCCL_HOME=", "CUDA_HOME=", "LD_LIBRARY_PATH="}
}

func TestLoadFailureIsAnError(t *testing.T) {
	if dltest.InChild() {
		_, err := nccl.LoadedVersion()
		require.ErrorIs(t, err, nccl.ErrLibraryNotFound)
		var le *nccl.LoadError
		require.ErrorAs(t, err, &le)
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_LIBNCCL"))
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_TEST_LOADER_SAYS"))

		info := nccl.LibraryInfo()
		assert.ErrorIs(t, info.Err, nccl.ErrLibraryNotFound)
		assert.Empty(t, info.Path)
		require.Len(t, info.Attempts, 1, "an explicit path is the only candidate")
		assert.Equal(t, "NCCLGO_LIBNCCL", info.Attempts[0].Source)

		var v int32
		err = nccl.GetVersion(&v)
		assert.ErrorIs(t, err, nccl.ErrLibraryNotFound, "a call reports the load error")
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_TEST_LOADER_SAYS"))
		assert.Equal(t, "nccl: result 5", nccl.InvalidUsage.Error(), "without the library a result is its number")
		return
	}
	tests := []struct {
		name       string
		path       func(t *testing.T) string
		loaderSays string
	}{
		{"nonexistent file", func(*testing.T) string { return "/nonexistent/libnccl.so.2" }, "No such file or directory"},
		{"text file named libnccl.so.2", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "libnccl.so.2")
			text := make([]byte, 0, 4096)
			for len(text) < 4000 {
				text = append(text, "not a shared library\n"...)
			}
			require.NoError(t, os.WriteFile(p, text, 0o644))
			return p
		}, "invalid ELF header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dltest.RunChild(t, "TestLoadFailureIsAnError", append(cleanEnv(),
				"NCCLGO_LIBNCCL="+tc.path(t), "NCCLGO_TEST_LOADER_SAYS="+tc.loaderSays)...)
		})
	}
}

func TestVersionAndFormatVersion(t *testing.T) {
	tests := []struct {
		major, minor, patch int
		code                int
		text                string
	}{
		{2, 29, 7, 22907, "2.29.7"},
		{2, 22, 3, 22203, "2.22.3"},
		{2, 9, 6, 20906, "2.9.6"},
		{2, 8, 4, 2804, "2.8.4"},
		{2, 4, 2, 2402, "2.4.2"},
		{3, 0, 1, 30001, "3.0.1"},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			assert.Equal(t, tc.code, nccl.Version(tc.major, tc.minor, tc.patch))
			assert.Equal(t, tc.text, nccl.FormatVersion(tc.code))
		})
	}
}
