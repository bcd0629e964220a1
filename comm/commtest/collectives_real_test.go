//go:build cgo

package commtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/libcache"
	"github.com/ncclgo/ncclgo/internal/testenv"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// TestCollectivesChooseThePathFromTheRealLibrary loads the real libnccl 2.29.7 and
// 2.22.3 (no GPU needed for ncclGetVersion), one per child process, and checks that
// the version each reports selects the native collectives or the grouped send/recv.
func TestCollectivesChooseThePathFromTheRealLibrary(t *testing.T) {
	if lib := os.Getenv("NCCLGO_COLLECTIVES_CHILD"); lib != "" {
		v, err := realVersion()
		require.NoError(t, err, "ncclGetVersion of %s", lib)
		want, err := strconv.Atoi(os.Getenv("NCCLGO_COLLECTIVES_WANT"))
		require.NoError(t, err)
		require.Equal(t, want, v, "version of %s", lib)
		checkCollectivePath(t, v)
		return
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, lib := range []struct {
		set  string
		code int
	}{{"nccl-2.29.7", 22907}, {"nccl-2.22.3", 22203}} {
		t.Run(lib.set, func(t *testing.T) {
			path := filepath.Join(libcache.Dir(), "lib", lib.set, "libnccl.so.2")
			if _, err := os.Stat(path); err != nil {
				msg := fmt.Sprintf("%s is not cached (%v): run make libs", path, err)
				if os.Getenv("NCCLGO_STRICT") != "" {
					t.Fatal(msg)
				}
				t.Skip(msg)
			}
			cmd := exec.Command(exe, "-test.run=^TestCollectivesChooseThePathFromTheRealLibrary$", "-test.count=1")
			cmd.Env = append(testenv.Environ(), "NCCLGO_COLLECTIVES_CHILD="+path, "NCCLGO_LIBNCCL="+path,
				"NCCLGO_COLLECTIVES_WANT="+strconv.Itoa(lib.code))
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child with %s:\n%s", path, out)
			require.Contains(t, string(out), "PASS", "child with %s ran the test:\n%s", path, out)
		})
	}
}

// realVersion is ncclGetVersion of the library raw/nccl loads ($NCCLGO_LIBNCCL).
func realVersion() (int, error) {
	var v int32
	err := nccl.GetVersion(&v)
	return int(v), err
}
