package dl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is an environment whose variables, python3 and folders are made up.
type fakeEnv struct {
	vars map[string]string
	py   string   // what LookPath("python3") finds; "" for none
	dirs []string // folders that exist, for Glob
}

func (f fakeEnv) Getenv(k string) string { return f.vars[k] }

func (f fakeEnv) LookPath(string) (string, error) {
	if f.py == "" {
		return "", errors.New("not found")
	}
	return f.py, nil
}

func (f fakeEnv) Glob(pattern string) []string {
	var out []string
	for _, d := range f.dirs {
		if ok, _ := filepath.Match(pattern, d); ok {
			out = append(out, d)
		}
	}
	return out
}

func testLibrary() *Library {
	return &Library{
		Name:      "NCCL",
		Env:       "NCCLGO_LIBNCCL",
		Sonames:   []string{"libnccl.so.2"},
		WheelDirs: []string{"nvidia/nccl/lib"},
		HomeEnvs:  []string{"NCCL_HOME", "CUDA_HOME"},
	}
}

func TestCandidatesFollowSearchOrder(t *testing.T) {
	everything := fakeEnv{
		vars: map[string]string{
			"VIRTUAL_ENV":  "/venv",
			"CONDA_PREFIX": "/conda",
			"HOME":         "/home/u",
			"NCCL_HOME":    "/opt/nccl",
			"CUDA_HOME":    "/usr/local/cuda",
		},
		py: "/opt/py/bin/python3",
		dirs: []string{
			"/venv/lib/python3.12/site-packages",
			"/conda/lib/python3.11/site-packages",
			"/opt/py/lib/python3.10/site-packages",
			"/home/u/.local/lib/python3.11/site-packages",
			"/usr/local/lib/python3.11/dist-packages",
			"/usr/lib/python3/dist-packages",
		},
	}
	wheel := "nvidia/nccl/lib/libnccl.so.2"
	tests := []struct {
		name     string
		explicit string
		env      fakeEnv
		want     []Attempt
	}{
		{
			name:     "SetPath is the only candidate, ahead of the env variable",
			explicit: "/x/libnccl.so.2",
			env:      fakeEnv{vars: map[string]string{"NCCLGO_LIBNCCL": "/y/libnccl.so.2"}},
			want:     []Attempt{{Source: "SetLibraryPath", Path: "/x/libnccl.so.2"}},
		},
		{
			name: "env variable is the only candidate",
			env:  fakeEnv{vars: map[string]string{"NCCLGO_LIBNCCL": "/y/libnccl.so.2", "NCCL_HOME": "/opt/nccl"}},
			want: []Attempt{{Source: "NCCLGO_LIBNCCL", Path: "/y/libnccl.so.2"}},
		},
		{
			name: "bare environment tries the soname only",
			env:  fakeEnv{},
			want: []Attempt{{Source: "soname", Path: "libnccl.so.2"}},
		},
		{
			name: "soname, then wheels from venv to system, then homes",
			env:  everything,
			want: []Attempt{
				{Source: "soname", Path: "libnccl.so.2"},
				{Source: "VIRTUAL_ENV", Path: "/venv/lib/python3.12/site-packages/" + wheel},
				{Source: "CONDA_PREFIX", Path: "/conda/lib/python3.11/site-packages/" + wheel},
				{Source: "python3 /opt/py/bin/python3", Path: "/opt/py/lib/python3.10/site-packages/" + wheel},
				{Source: "user site-packages", Path: "/home/u/.local/lib/python3.11/site-packages/" + wheel},
				{Source: "system site-packages", Path: "/usr/local/lib/python3.11/dist-packages/" + wheel},
				{Source: "system site-packages", Path: "/usr/lib/python3/dist-packages/" + wheel},
				{Source: "NCCL_HOME", Path: "/opt/nccl/lib64/libnccl.so.2"},
				{Source: "NCCL_HOME", Path: "/opt/nccl/lib/libnccl.so.2"},
				{Source: "CUDA_HOME", Path: "/usr/local/cuda/lib64/libnccl.so.2"},
				{Source: "CUDA_HOME", Path: "/usr/local/cuda/lib/libnccl.so.2"},
			},
		},
		{
			name: "a folder reached twice is tried once",
			env: fakeEnv{
				vars: map[string]string{"VIRTUAL_ENV": "/usr/local", "NCCL_HOME": "/h", "CUDA_HOME": "/h"},
				dirs: []string{"/usr/local/lib/python3.11/site-packages"},
			},
			want: []Attempt{
				{Source: "soname", Path: "libnccl.so.2"},
				{Source: "VIRTUAL_ENV", Path: "/usr/local/lib/python3.11/site-packages/" + wheel},
				{Source: "NCCL_HOME", Path: "/h/lib64/libnccl.so.2"},
				{Source: "NCCL_HOME", Path: "/h/lib/libnccl.so.2"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := testLibrary().candidates(tc.explicit, tc.env)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCandidatesWithoutWheelDirsSkipPython(t *testing.T) {
	l := &Library{Name: "CUDA driver", Sonames: []string{"libcuda.so.1"}, HomeEnvs: []string{"CUDA_HOME"}}
	e := fakeEnv{
		vars: map[string]string{"VIRTUAL_ENV": "/venv", "CUDA_HOME": "/cuda"},
		dirs: []string{"/venv/lib/python3.12/site-packages"},
	}
	assert.Equal(t, []Attempt{
		{Source: "soname", Path: "libcuda.so.1"},
		{Source: "CUDA_HOME", Path: "/cuda/lib64/libcuda.so.1"},
		{Source: "CUDA_HOME", Path: "/cuda/lib/libcuda.so.1"},
	}, l.candidates("", e))
}

func TestSitePackagesFollowsPython3Links(t *testing.T) {
	root := t.TempDir()
	realPrefix := filepath.Join(root, "real")
	linkPrefix := filepath.Join(root, "link")
	for _, d := range []string{
		filepath.Join(realPrefix, "bin"),
		filepath.Join(realPrefix, "lib/python3.11/site-packages"),
		filepath.Join(linkPrefix, "bin"),
		filepath.Join(linkPrefix, "lib/python3.11/site-packages"),
	} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(realPrefix, "bin/python3.11"), nil, 0o755))
	py := filepath.Join(linkPrefix, "bin/python3")
	require.NoError(t, os.Symlink(filepath.Join(realPrefix, "bin/python3.11"), py))

	e := fakeEnv{py: py}
	var dirs []string
	for _, s := range sitePackages(realGlobEnv{e}) {
		if s.source == "python3 "+py {
			dirs = append(dirs, s.dir)
		}
	}
	assert.Equal(t, []string{
		filepath.Join(linkPrefix, "lib/python3.11/site-packages"),
		filepath.Join(realPrefix, "lib/python3.11/site-packages"),
	}, dirs)
}

// realGlobEnv is a fakeEnv that globs the real file system.
type realGlobEnv struct{ fakeEnv }

func (realGlobEnv) Glob(p string) []string { return osEnv{}.Glob(p) }
