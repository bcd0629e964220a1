//go:build cgo

package cuda_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
)

// Each test below runs its checks in a fresh process (dltest.RunChild): a process loads
// libcuda once.

// cleanEnv empties the variables the search reads, so the machine's setup does not leak
// into a child (later entries of a child's environment win).
func cleanEnv() []string {
	return []string{"NCCLGO_LIBCUDA=", "CUDA_HOME=", "LD_LIBRARY_PATH="}
}

func TestLoadedVersionOfRealDriver(t *testing.T) {
	if dltest.InChild() {
		code, err := cuda.LoadedVersion()
		require.NoError(t, err)
		assert.Equal(t, 12020, code)

		info := cuda.LibraryInfo()
		require.NoError(t, info.Err)
		want := os.Getenv("NCCLGO_TEST_WANT_SOURCE")
		if want != "soname" && info.Source == "soname" {
			t.Skipf("this machine's loader finds %s by soname (%s), so %s is never reached", info.Attempts[0].Path, info.Path, want)
		}
		assert.Equal(t, os.Getenv("NCCLGO_TEST_WANT_PATH"), info.Path)
		assert.Equal(t, os.Getenv("NCCLGO_TEST_WANT_SOURCE"), info.Source)
		assert.Equal(t, "CUDA 12.2", info.Version)
		assert.Equal(t, 12020, info.VersionCode)
		return
	}
	lib := dltest.Lib(t, dltest.CUDA535)
	tests := []struct {
		name string
		env  func(t *testing.T) (env []string, wantPath, wantSource string)
	}{
		{"NCCLGO_LIBCUDA", func(*testing.T) ([]string, string, string) {
			return []string{"NCCLGO_LIBCUDA=" + lib}, lib, "NCCLGO_LIBCUDA"
		}},
		{"soname through LD_LIBRARY_PATH", func(*testing.T) ([]string, string, string) {
			return []string{"LD_LIBRARY_PATH=" + filepath.Dir(lib)}, lib, "soname"
		}},
		{"CUDA_HOME lib64", func(t *testing.T) ([]string, string, string) {
			home := t.TempDir()
			p := filepath.Join(home, "lib64", "libcuda.so.1")
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.Symlink(lib, p))
			return []string{"CUDA_HOME=" + home}, p, "CUDA_HOME"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, wantPath, wantSource := tc.env(t)
			env = append(env, "NCCLGO_TEST_WANT_PATH="+wantPath, "NCCLGO_TEST_WANT_SOURCE="+wantSource)
			dltest.RunChild(t, "TestLoadedVersionOfRealDriver", append(cleanEnv(), env...)...)
		})
	}
}

func TestLoadFailureIsAnError(t *testing.T) {
	if dltest.InChild() {
		_, err := cuda.LoadedVersion()
		require.ErrorIs(t, err, cuda.ErrLibraryNotFound)
		var le *cuda.LoadError
		require.ErrorAs(t, err, &le)
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_LIBCUDA"))
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_TEST_LOADER_SAYS"))
		assert.ErrorIs(t, cuda.LibraryInfo().Err, cuda.ErrLibraryNotFound)

		err = cuda.Init(0)
		assert.ErrorIs(t, err, cuda.ErrLibraryNotFound, "a call reports the load error")
		assert.Contains(t, err.Error(), os.Getenv("NCCLGO_TEST_LOADER_SAYS"))
		assert.Equal(t, "cuda: CUresult 100", cuda.ErrorNoDevice.Error(), "without the library a result is its number")
		return
	}
	tests := []struct {
		name       string
		path       func(t *testing.T) string
		loaderSays string
	}{
		{"nonexistent file", func(*testing.T) string { return "/nonexistent/libcuda.so.1" }, "No such file or directory"},
		{"empty file named libcuda.so.1", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "libcuda.so.1")
			require.NoError(t, os.WriteFile(p, nil, 0o644))
			return p
		}, "file too short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dltest.RunChild(t, "TestLoadFailureIsAnError", append(cleanEnv(),
				"NCCLGO_LIBCUDA="+tc.path(t), "NCCLGO_TEST_LOADER_SAYS="+tc.loaderSays)...)
		})
	}
}

func TestFormatVersion(t *testing.T) {
	tests := []struct {
		code int
		want string
	}{
		{12020, "12.2"},
		{12040, "12.4"},
		{11080, "11.8"},
		{13000, "13.0"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, cuda.FormatVersion(tc.code))
	}
}
