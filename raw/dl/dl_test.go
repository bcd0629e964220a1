//go:build cgo && linux

package dl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
	"github.com/ncclgo/ncclgo/raw/internal/dl/dltest"
)

// fakeSoname is a soname that no system folder holds, so the loader's own search fails
// and the search goes on to the folders the test prepares. Tests that need the soname
// search to fail use a fresh one (newSoname): once a library is loaded, the loader
// answers its soname with it.
const fakeSoname = "libncclgo_dltest.so.2"

var sonames atomic.Int32

// newSoname returns a soname no library loaded so far has.
func newSoname() string { return fmt.Sprintf("libncclgo_dltest%d.so.2", sonames.Add(1)) }

// fakeSource is a small library with a version function and one other function.
const fakeSource = `
int fakeGetVersion(int *v) { *v = %d; return 0; }
int fakeAdd(int a, int b) { return a + b; }
`

// gcc and its PATH (for as and ld) are taken before any test changes PATH.
var (
	gcc, gccErr = exec.LookPath("gcc")
	gccPath     = os.Getenv("PATH")
)

// gccCommand runs gcc with the PATH the tests started with.
func gccCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(gcc, args...)
	cmd.Env = append(testenv.Environ(), "PATH="+gccPath)
	return cmd
}

// buildFake compiles the fake library reporting version into dir/name and returns its path.
func buildFake(t *testing.T, dir, name string, version int) string {
	return buildFakeSoname(t, dir, name, fakeSoname, version)
}

// buildFakeSoname is buildFake with the library's soname.
func buildFakeSoname(t *testing.T, dir, name, soname string, version int) string {
	t.Helper()
	if gccErr != nil {
		dltest.Missing(t, "gcc not found: the loader tests compile a small shared library (apt-get install gcc)")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	src := filepath.Join(t.TempDir(), "fake.c")
	require.NoError(t, os.WriteFile(src, fmt.Appendf(nil, fakeSource, version), 0o644))
	out := filepath.Join(dir, name)
	b, err := gccCommand("-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", out, src).CombinedOutput()
	require.NoError(t, err, "gcc: %s", b)
	return out
}

func fakeLibrary() *Library { return fakeLibrarySoname(fakeSoname) }

func fakeLibrarySoname(soname string) *Library {
	return &Library{
		Name:          "Fake",
		Env:           "NCCLGO_DLTEST_LIB",
		Sonames:       []string{soname},
		WheelDirs:     []string{"nvidia/fake/lib"},
		HomeEnvs:      []string{"NCCLGO_DLTEST_HOME"},
		VersionSymbol: "fakeGetVersion",
		FormatVersion: func(code int) string { return fmt.Sprintf("Fake %d.%d", code/100, code%100) },
	}
}

// isolate clears every variable the search reads, so the machine's setup does not leak in.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"NCCLGO_DLTEST_LIB", "NCCLGO_DLTEST_HOME", "VIRTUAL_ENV", "CONDA_PREFIX"} {
		t.Setenv(k, "")
	}
	t.Setenv("PATH", t.TempDir())
	t.Setenv("HOME", t.TempDir())
}

func TestLoadFindsEachKindOfCandidate(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, l *Library, root, soname string) string // returns the expected file
		wantSource string
		attempts   int
	}{
		{
			name: "env variable",
			setup: func(t *testing.T, _ *Library, root, soname string) string {
				p := buildFakeSoname(t, root, "any-name.so", soname, 1203)
				t.Setenv("NCCLGO_DLTEST_LIB", p)
				return p
			},
			wantSource: "NCCLGO_DLTEST_LIB",
			attempts:   1,
		},
		{
			name: "SetPath wins over the env variable",
			setup: func(t *testing.T, l *Library, root, soname string) string {
				p := buildFakeSoname(t, filepath.Join(root, "a"), soname, soname, 1203)
				t.Setenv("NCCLGO_DLTEST_LIB", "/nonexistent/"+soname)
				require.NoError(t, l.SetPath(p))
				return p
			},
			wantSource: "SetLibraryPath",
			attempts:   1,
		},
		{
			name: "virtualenv wheel after the soname failed",
			setup: func(t *testing.T, _ *Library, root, soname string) string {
				venv := filepath.Join(root, "venv")
				p := buildFakeSoname(t, filepath.Join(venv, "lib/python3.12/site-packages/nvidia/fake/lib"), soname, soname, 1203)
				t.Setenv("VIRTUAL_ENV", venv)
				return p
			},
			wantSource: "VIRTUAL_ENV",
			attempts:   2,
		},
		{
			name: "python3 on PATH, without running it",
			setup: func(t *testing.T, _ *Library, root, soname string) string {
				prefix := filepath.Join(root, "py")
				p := buildFakeSoname(t, filepath.Join(prefix, "lib/python3.10/site-packages/nvidia/fake/lib"), soname, soname, 1203)
				require.NoError(t, os.MkdirAll(filepath.Join(prefix, "bin"), 0o755))
				// A script that would fail the test if the search ran it.
				require.NoError(t, os.WriteFile(filepath.Join(prefix, "bin/python3"), []byte("#!/bin/sh\nexit 1\n"), 0o755))
				t.Setenv("PATH", filepath.Join(prefix, "bin"))
				return p
			},
			wantSource: "python3 ",
			attempts:   2,
		},
		{
			name: "home lib64 after the empty wheel folders",
			setup: func(t *testing.T, _ *Library, root, soname string) string {
				venv := filepath.Join(root, "venv")
				require.NoError(t, os.MkdirAll(filepath.Join(venv, "lib/python3.12/site-packages"), 0o755))
				t.Setenv("VIRTUAL_ENV", venv)
				home := filepath.Join(root, "home")
				p := buildFakeSoname(t, filepath.Join(home, "lib64"), soname, soname, 1203)
				t.Setenv("NCCLGO_DLTEST_HOME", home)
				return p
			},
			wantSource: "NCCLGO_DLTEST_HOME",
			attempts:   3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			soname := newSoname()
			l := fakeLibrarySoname(soname)
			want := tc.setup(t, l, t.TempDir(), soname)

			require.NoError(t, l.Load())
			info := l.Info()
			require.NoError(t, info.Err)
			assert.Equal(t, want, info.Path)
			assert.True(t, strings.HasPrefix(info.Source, tc.wantSource), "source %q", info.Source)
			assert.Equal(t, "Fake 12.3", info.Version)
			assert.Equal(t, 1203, info.VersionCode)
			var attempts []Attempt
			for _, a := range info.Attempts {
				if a.Source != "system site-packages" { // depends on this machine's Python
					attempts = append(attempts, a)
				}
			}
			require.Len(t, attempts, tc.attempts)
			for _, a := range attempts[:len(attempts)-1] {
				assert.Error(t, a.Err, "failed attempt %s carries the loader message", a.Path)
			}
			assert.NoError(t, attempts[len(attempts)-1].Err)
			assert.True(t, l.Loaded())
			code, err := l.Version()
			require.NoError(t, err)
			assert.Equal(t, 1203, code)
		})
	}
}

func TestResolveCachesTheAddress(t *testing.T) {
	isolate(t)
	l := fakeLibrary()
	require.NoError(t, l.SetPath(buildFake(t, t.TempDir(), fakeSoname, 1)))
	sym := &Symbol{Name: "fakeAdd", Since: "1.0"}

	p1, err := l.Resolve(sym)
	require.NoError(t, err)
	require.NotZero(t, p1)
	p2, err := l.Resolve(sym)
	require.NoError(t, err)
	assert.Equal(t, p1, p2)

	other, err := l.Resolve(&Symbol{Name: "fakeGetVersion"})
	require.NoError(t, err)
	assert.NotEqual(t, p1, other, "two functions have two addresses")

	allocs := testing.AllocsPerRun(100, func() { _, _ = l.Resolve(sym) })
	assert.Zero(t, allocs, "cached Resolve allocates")
}

func TestResolveConcurrentFirstUse(t *testing.T) {
	isolate(t)
	l := fakeLibrary()
	t.Setenv("NCCLGO_DLTEST_LIB", buildFake(t, t.TempDir(), fakeSoname, 1))
	syms := []*Symbol{{Name: "fakeAdd"}, {Name: "fakeGetVersion"}}
	const workers = 16
	got := make([][2]uintptr, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for j, s := range syms {
				p, err := l.Resolve(s)
				assert.NoError(t, err)
				got[i][j] = p
			}
		})
	}
	wg.Wait()
	for i := range got {
		assert.Equal(t, got[0], got[i])
	}
	assert.Len(t, l.Info().Attempts, 1, "the library is searched once")
}

func TestResolveMissingSymbolNamesVersions(t *testing.T) {
	isolate(t)
	path := buildFake(t, t.TempDir(), fakeSoname, 2203)
	tests := []struct {
		name   string
		driver bool
		since  string
		want   string
	}{
		{"newer library needed", false, "22.9", "symbol fakeNewer not found in " + path + " (Fake 22.3): needs Fake ≥ 22.9"},
		{"not in this driver", true, "12.4.1", "symbol fakeNewer not found in " + path + ": not in this driver (Fake 22.3); declared by fake.h 12.4.1"},
		{"no version known for the symbol", false, "", "symbol fakeNewer not found in " + path + " (Fake 22.3)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := fakeLibrary()
			l.Driver = tc.driver
			l.Header = "fake.h"
			require.NoError(t, l.SetPath(path))
			sym := &Symbol{Name: "fakeNewer", Since: tc.since}

			p, err := l.Resolve(sym)
			assert.Zero(t, p)
			require.ErrorIs(t, err, ErrSymbolNotFound)
			var se *SymbolError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, SymbolError{
				Symbol: "fakeNewer", Library: "Fake", Path: path, Version: "Fake 22.3",
				Since: tc.since, Header: "fake.h", Driver: tc.driver,
			}, *se)
			assert.Equal(t, tc.want, err.Error())

			_, err = l.Resolve(&Symbol{Name: "fakeAdd"})
			assert.NoError(t, err, "a missing symbol leaves the library usable")
		})
	}
}

func TestLoadFailuresAreErrors(t *testing.T) {
	textFile := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), fakeSoname)
		require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("this is not a shared library, it is a text file\n", 10)), 0o644))
		return p
	}
	tests := []struct {
		name       string
		path       func(t *testing.T) string
		loaderSays string
	}{
		{"nonexistent file", func(*testing.T) string { return "/nonexistent/" + fakeSoname }, "No such file"},
		{"text file with a library's name", textFile, "invalid ELF header"},
		{"a folder", func(t *testing.T) string { return t.TempDir() }, "cannot read file data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			path := tc.path(t)
			t.Setenv("NCCLGO_DLTEST_LIB", path)
			l := fakeLibrary()

			err := l.Load()
			require.ErrorIs(t, err, ErrLibraryNotFound)
			var le *LoadError
			require.ErrorAs(t, err, &le)
			require.Len(t, le.Attempts, 1, "an explicit path is the only candidate")
			assert.Equal(t, path, le.Attempts[0].Path)
			assert.Contains(t, err.Error(), path)
			assert.Contains(t, err.Error(), tc.loaderSays)
			assert.Contains(t, err.Error(), "NCCLGO_DLTEST_LIB")

			_, rerr := l.Resolve(&Symbol{Name: "fakeAdd"})
			assert.ErrorIs(t, rerr, ErrLibraryNotFound)
			_, verr := l.Version()
			assert.ErrorIs(t, verr, ErrLibraryNotFound)
			info := l.Info()
			assert.Empty(t, info.Path)
			assert.ErrorIs(t, info.Err, ErrLibraryNotFound)
			assert.False(t, l.Loaded())
		})
	}
}

func TestLoadNothingFoundListsEveryAttempt(t *testing.T) {
	isolate(t)
	venv := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(venv, "lib/python3.12/site-packages"), 0o755))
	t.Setenv("VIRTUAL_ENV", venv)
	t.Setenv("NCCLGO_DLTEST_HOME", "/nonexistent-home")
	soname := newSoname()
	l := fakeLibrarySoname(soname)

	err := l.Load()
	require.ErrorIs(t, err, ErrLibraryNotFound)
	var le *LoadError
	require.ErrorAs(t, err, &le)
	var sources []string
	for _, a := range le.Attempts {
		if a.Source != "system site-packages" { // depends on this machine's Python
			sources = append(sources, a.Source)
		}
		assert.Contains(t, err.Error(), a.Path)
	}
	assert.Equal(t, []string{"soname", "VIRTUAL_ENV", "NCCLGO_DLTEST_HOME", "NCCLGO_DLTEST_HOME"}, sources)
	assert.True(t, strings.HasPrefix(err.Error(), "Fake library not found: tried "+soname+" (soname): "), err.Error())
}

func TestSetPath(t *testing.T) {
	isolate(t)
	path := buildFake(t, t.TempDir(), fakeSoname, 1)

	t.Run("empty path is refused", func(t *testing.T) {
		err := fakeLibrary().SetPath("")
		require.Error(t, err)
		assert.Equal(t, "Fake library path is empty", err.Error())
	})
	t.Run("after a failed load it allows a retry", func(t *testing.T) {
		l := fakeLibrary()
		require.NoError(t, l.SetPath("/nonexistent/"+fakeSoname))
		require.ErrorIs(t, l.Load(), ErrLibraryNotFound)
		require.NoError(t, l.SetPath(path))
		require.NoError(t, l.Load())
		assert.Equal(t, path, l.Info().Path)
	})
	t.Run("after a successful load it is refused unless unchanged", func(t *testing.T) {
		l := fakeLibrary()
		require.NoError(t, l.SetPath(path))
		require.NoError(t, l.Load())
		assert.NoError(t, l.SetPath(path))
		err := l.SetPath("/other/" + fakeSoname)
		require.ErrorIs(t, err, ErrAlreadyLoaded)
		assert.Contains(t, err.Error(), "/other/"+fakeSoname)
		assert.Contains(t, err.Error(), path)
	})
}

func TestInvalidArgumentsAreErrors(t *testing.T) {
	isolate(t)
	var nilLib *Library
	tests := []struct {
		name string
		call func() error
	}{
		{"nil library Load", func() error { return nilLib.Load() }},
		{"nil library SetPath", func() error { return nilLib.SetPath("/x") }},
		{"nil library Version", func() error { _, err := nilLib.Version(); return err }},
		{"nil library Info", func() error { return nilLib.Info().Err }},
		{"nil library Resolve", func() error { _, err := nilLib.Resolve(&Symbol{Name: "x"}); return err }},
		{"unnamed symbol", func() error { _, err := fakeLibrary().Resolve(&Symbol{}); return err }},
		{"symbol name with NUL", func() error {
			l := fakeLibrary()
			if err := l.SetPath(buildFake(t, t.TempDir(), fakeSoname, 1)); err != nil {
				return nil
			}
			_, err := l.Resolve(&Symbol{Name: "fake\x00Add"})
			return err
		}},
		{"path with NUL", func() error { l := fakeLibrary(); _ = l.SetPath("/x\x00y"); return l.Load() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			require.Error(t, err)
			assert.False(t, errors.Is(err, ErrNeedsCgo))
		})
	}
	assert.False(t, nilLib.Loaded())
}

func TestVersionUnknownWithoutVersionSymbol(t *testing.T) {
	isolate(t)
	l := fakeLibrary()
	l.VersionSymbol = "fakeNoSuchFunction"
	require.NoError(t, l.SetPath(buildFake(t, t.TempDir(), fakeSoname, 1)))
	_, err := l.Version()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fakeNoSuchFunction")
	assert.Empty(t, l.Info().Version)
	_, err = l.Resolve(&Symbol{Name: "fakeMissing", Since: "2.0"})
	assert.Contains(t, err.Error(), "(unknown version): needs Fake ≥ 2.0")
}

func BenchmarkResolve(b *testing.B) {
	if gccErr != nil {
		dltest.Missing(b, "gcc not found: the benchmark compiles a small shared library (apt-get install gcc)")
	}
	dir := b.TempDir()
	src := filepath.Join(dir, "fake.c")
	require.NoError(b, os.WriteFile(src, fmt.Appendf(nil, fakeSource, 1), 0o644))
	lib := filepath.Join(dir, fakeSoname)
	out, err := gccCommand("-shared", "-fPIC", "-o", lib, src).CombinedOutput()
	require.NoError(b, err, "%s", out)
	l := fakeLibrary()
	require.NoError(b, l.SetPath(lib))
	sym := &Symbol{Name: "fakeAdd"}
	_, err = l.Resolve(sym)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.Resolve(sym)
	}
}

// TestNotFoundIsPerLibrary checks that each library's NotFound error is its own value:
// a failed load matches its library's, not another's, and both match
// ErrLibraryNotFound (the generated packages' ErrLibraryNotFound were one shared value,
// so a missing CUDA driver matched NCCL's).
func TestNotFoundIsPerLibrary(t *testing.T) {
	isolate(t)
	t.Setenv("NCCLGO_DLTEST_LIB", "/nonexistent/"+fakeSoname)
	l, other := fakeLibrary(), fakeLibrary()
	require.Same(t, l.NotFound(), l.NotFound(), "one value per library")
	require.False(t, l.NotFound() == other.NotFound(), "distinct values")
	err := l.Load()
	assert.ErrorIs(t, err, l.NotFound())
	assert.NotErrorIs(t, err, other.NotFound())
	assert.ErrorIs(t, err, ErrLibraryNotFound)
	assert.ErrorIs(t, l.NotFound(), ErrLibraryNotFound)
	assert.Contains(t, l.NotFound().Error(), "library not found")
}
