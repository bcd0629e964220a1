package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// mainEnv makes the test binary run ncclinfo's main instead of the tests: a process
// loads each library once, so every real-library case runs in a fresh process.
const mainEnv = "NCCLINFO_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, osSources()))
	}
	os.Exit(m.Run())
}

// ncclinfo runs ncclinfo in a new process with env added and returns its stdout and
// exit code; stderr is added to failure messages.
func ncclinfo(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(testenv.Environ(), mainEnv+"=1"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running ncclinfo: %v", err)
	}
	require.Empty(t, stderr.String(), "stderr")
	return stdout.String(), cmd.ProcessState.ExitCode()
}

// cachedLib returns a library that `make libs` caches, skipping t when it is absent.
func cachedLib(t *testing.T, set, file string) string {
	t.Helper()
	root := os.Getenv("NCCLGO_CACHE")
	if root == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			root = filepath.Join(x, "ncclgo")
		} else {
			home, err := os.UserHomeDir()
			require.NoError(t, err)
			root = filepath.Join(home, ".cache", "ncclgo")
		}
	}
	p := filepath.Join(root, "lib", set, file)
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("%s is not cached (%v): run make libs (NCCLGO_STRICT is set: a missing library fails)", p, err)
		}
		t.Skipf("%s is not cached (%v): run make libs", p, err)
	}
	return p
}

func decodeReport(t *testing.T, out string) Report {
	t.Helper()
	var r Report
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

func TestReportWithRealLibraries(t *testing.T) {
	cudaLib := cachedLib(t, "cuda-535.261.03", "libcuda.so.1")
	tests := []struct {
		set     string
		version string
		code    int
	}{
		{"nccl-2.29.7", "NCCL 2.29.7", 22907},
		{"nccl-2.22.3", "NCCL 2.22.3", 22203},
	}
	for _, tc := range tests {
		t.Run(tc.set, func(t *testing.T) {
			ncclLib := cachedLib(t, tc.set, "libnccl.so.2")
			env := []string{"NCCLGO_LIBNCCL=" + ncclLib, "NCCLGO_LIBCUDA=" + cudaLib, "NCCL_DEBUG=WARN"}

			out, code := ncclinfo(t, env, "--json")
			require.Equal(t, 0, code, out)
			r := decodeReport(t, out)

			assert.True(t, r.NCCL.Loaded)
			assert.Equal(t, ncclLib, r.NCCL.Path)
			assert.Equal(t, "NCCLGO_LIBNCCL", r.NCCL.Source)
			assert.Equal(t, tc.version, r.NCCL.Version)
			assert.Equal(t, tc.code, r.NCCL.VersionCode)
			require.Len(t, r.NCCL.Attempts, 1)
			assert.Empty(t, r.NCCL.Attempts[0].Error)

			assert.True(t, r.CUDA.Loaded)
			assert.Equal(t, "CUDA 12.2", r.CUDA.Version)
			assert.Equal(t, 12020, r.CUDA.VersionCode)

			// Debian's driver library on a machine without a GPU.
			assert.Equal(t, 0, r.GPUs.Count)
			assert.Contains(t, r.GPUs.Error, "CUDA_ERROR_NO_DEVICE")

			assert.Contains(t, r.Env, EnvVar{"NCCL_DEBUG", "WARN"})
			assert.Contains(t, r.Env, EnvVar{"NCCLGO_LIBNCCL", ncclLib})
			assert.Equal(t, "(devel)", r.Module.Version)
			assert.True(t, r.Module.Cgo)

			require.Len(t, r.Coverage, 2)
			for _, c := range r.Coverage {
				require.Empty(t, c.Error, c.Package)
				require.NotZero(t, c.Functions, c.Package)
				assert.Equal(t, c.Functions, c.Present+len(c.Missing), c.Package)
				if c.Package == "raw/nccl" {
					// Exactly the functions first declared by a newer nccl.h are missing.
					for _, m := range c.Missing {
						since := strings.Split(m.Since, ".")
						require.Len(t, since, 3, m.Symbol)
						mj, _ := strconv.Atoi(since[0])
						mn, _ := strconv.Atoi(since[1])
						pt, _ := strconv.Atoi(since[2])
						assert.Greater(t, nccl.Version(mj, mn, pt), tc.code, "%s (since %s) is missing from %s", m.Symbol, m.Since, tc.version)
					}
					if tc.code < 22300 {
						assert.NotEmpty(t, c.Missing, "functions newer than %s", tc.version)
					}
				}
			}

			text, code := ncclinfo(t, env)
			require.Equal(t, 0, code, text)
			assert.Contains(t, text, tc.version+"\n")
			assert.Contains(t, text, ncclLib)
			assert.Contains(t, text, "found through NCCLGO_LIBNCCL")
			assert.Contains(t, text, "NCCL_DEBUG=WARN")
			assert.Contains(t, text, "none: cuInit: ")
		})
	}
}

func TestReportWithoutLibrariesSaysSoAndExitsZero(t *testing.T) {
	dir := t.TempDir()
	missingNCCL := filepath.Join(dir, "absent", "libnccl.so.2")
	missingCUDA := filepath.Join(dir, "absent", "libcuda.so.1")
	env := []string{"NCCLGO_LIBNCCL=" + missingNCCL, "NCCLGO_LIBCUDA=" + missingCUDA}

	out, code := ncclinfo(t, env, "--json")
	require.Equal(t, 0, code, out)
	r := decodeReport(t, out)
	for _, l := range []Library{r.NCCL, r.CUDA} {
		assert.False(t, l.Loaded, l.Name)
		assert.Empty(t, l.Path, l.Name)
		assert.Contains(t, l.Error, "library not found", l.Name)
		require.Len(t, l.Attempts, 1, l.Name)
		assert.Contains(t, l.Attempts[0].Error, "No such file", l.Name)
	}
	assert.Equal(t, missingNCCL, r.NCCL.Attempts[0].Path)
	assert.Equal(t, "no CUDA driver loaded", r.GPUs.Error)

	text, code := ncclinfo(t, env)
	require.Equal(t, 0, code, text)
	assert.Contains(t, text, "not loaded: no candidate file could be loaded")
	assert.Contains(t, text, "1. NCCLGO_LIBNCCL")
	assert.Contains(t, text, missingNCCL+": cannot open shared object file")
	assert.Contains(t, text, "GPUs        none: no CUDA driver loaded")
}

func TestReportWithBrokenLibraryShowsTheLoadersMessage(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "libnccl.so.2")
	require.NoError(t, os.WriteFile(broken, bytes.Repeat([]byte("this is a text file, not a shared library\n"), 4), 0o644))

	out, code := ncclinfo(t, []string{"NCCLGO_LIBNCCL=" + broken}, "--json")
	require.Equal(t, 0, code, out)
	r := decodeReport(t, out)
	assert.False(t, r.NCCL.Loaded)
	require.Len(t, r.NCCL.Attempts, 1)
	assert.Equal(t, "NCCLGO_LIBNCCL", r.NCCL.Attempts[0].Source)
	assert.Equal(t, broken+": invalid ELF header", r.NCCL.Attempts[0].Error)

	text, code := ncclinfo(t, []string{"NCCLGO_LIBNCCL=" + broken})
	require.Equal(t, 0, code)
	assert.Contains(t, text, broken+": invalid ELF header")
}

func TestRunRejectsBadCommandLines(t *testing.T) {
	tests := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--nope"}, 2, "flag provided but not defined: -nope"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-h"}, 0, "usage: ncclinfo [--json]"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr, fakeSources())
			assert.Equal(t, tc.code, code)
			assert.Empty(t, stdout.String())
			assert.Contains(t, stderr.String(), tc.err)
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRunReportsWriteFailure(t *testing.T) {
	for _, args := range [][]string{nil, {"--json"}} {
		var stderr bytes.Buffer
		assert.Equal(t, 1, run(args, failingWriter{}, &stderr, fakeSources()))
		assert.Contains(t, stderr.String(), "ncclinfo: writing the report: disk full")
	}
}

// fakeSources describe a machine with two GPUs linked by NVLink, a loaded NCCL and a
// driver that lacks some functions.
func fakeSources() sources {
	return sources{
		build: func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/ncclgo/ncclgo", Version: "v0.3.0"},
				Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
					{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true
		},
		environ: func() []string {
			return []string{"HOME=/root", "NCCL_DEBUG=INFO", "NCCLGO_LIBNCCL=/opt/nccl/libnccl.so.2", "CUDA_VISIBLE_DEVICES=0,1", "NCCLX=1"}
		},
		nccl: func() nccl.LoadInfo {
			return nccl.LoadInfo{Library: "NCCL", Path: "/opt/nccl/libnccl.so.2", Source: "NCCLGO_LIBNCCL", Version: "NCCL 2.29.7", VersionCode: 22907,
				Attempts: []nccl.Attempt{{Source: "NCCLGO_LIBNCCL", Path: "/opt/nccl/libnccl.so.2"}}}
		},
		cuda: func() nccl.LoadInfo {
			return nccl.LoadInfo{Library: "CUDA driver", Path: "/usr/lib/libcuda.so.1", Source: "soname", Version: "CUDA 13.0", VersionCode: 13000,
				Attempts: []nccl.Attempt{{Source: "soname", Path: "libcuda.so.1"}}}
		},
		gpus: func() GPUs {
			return GPUs{Count: 2,
				Devices: []GPU{
					{Index: 0, Name: "NVIDIA H200", MemoryBytes: 150 << 30, ComputeCapability: "9.0", Multiprocessors: 132, PCIBusID: "0000:18:00.0"},
					{Index: 1, Name: "NVIDIA H200", MemoryBytes: 150 << 30, ComputeCapability: "9.0", Multiprocessors: 132, PCIBusID: "0000:2A:00.0"},
				},
				Peers: []Peer{{From: 0, To: 1, Access: true, NativeAtomics: true}, {From: 1, To: 0}},
			}
		},
		coverage: func() []Coverage {
			return []Coverage{
				summarize("raw/nccl", "NCCL 2.29.7", []symbolState{{"ncclAllReduce", "2.22.3", true}, {"ncclCommSuspend", "2.29.7", true}}, nil),
				summarize("raw/cuda", "CUDA 13.0", []symbolState{{"cuInit", "12.4.1", true}, {"cuMemBatchDecompressAsync", "12.4.1", false}}, nil),
			}
		},
	}
}

func TestTextReportOfAMachineWithTwoDevices(t *testing.T) {
	var out bytes.Buffer
	require.Equal(t, 0, run(nil, &out, &bytes.Buffer{}, fakeSources()))
	want := `module      github.com/ncclgo/ncclgo v0.3.0
            go1.26.0 linux/arm64, cgo, revision 0123456789ab (modified)

NCCL        NCCL 2.29.7
            /opt/nccl/libnccl.so.2
            found through NCCLGO_LIBNCCL
            search order, first success wins:
              1. NCCLGO_LIBNCCL         /opt/nccl/libnccl.so.2: loaded

CUDA        CUDA 13.0
            /usr/lib/libcuda.so.1
            found through soname
            search order, first success wins:
              1. soname                 libcuda.so.1: loaded

GPUs        2 visible
              0  NVIDIA H200, 150.0 GiB, compute capability 9.0, 132 SMs, PCI 0000:18:00.0
              1  NVIDIA H200, 150.0 GiB, compute capability 9.0, 132 SMs, PCI 0000:2A:00.0
            peer access from row to column (P: peer access, A: native atomics, an NVLink-class link; rN: performance rank, lower is faster):
                  0       1
              0   x       PA r0
              1   -       x

environment CUDA_VISIBLE_DEVICES=0,1
            NCCLGO_LIBNCCL=/opt/nccl/libnccl.so.2
            NCCL_DEBUG=INFO

coverage    raw/nccl: 2 of 2 functions present in NCCL 2.29.7
            raw/cuda: 1 of 2 functions present in CUDA 13.0; 1 missing (first pinned header declaring each):
              cuMemBatchDecompressAsync (12.4.1)
`
	assert.Equal(t, want, out.String())
}

func TestJSONShape(t *testing.T) {
	src := fakeSources()
	src.cuda = func() nccl.LoadInfo {
		return nccl.LoadInfo{Library: "CUDA driver", Err: errors.New("CUDA driver library not found: no candidate file")}
	}
	var out bytes.Buffer
	require.Equal(t, 0, run([]string{"--json"}, &out, &bytes.Buffer{}, src))

	var doc map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc))
	for _, key := range []string{"module", "nccl", "cuda", "gpus", "env", "coverage"} {
		assert.Contains(t, doc, key)
	}
	mod := doc["module"].(map[string]any)
	assert.Equal(t, "v0.3.0", mod["version"])
	assert.Equal(t, true, mod["cgo"])

	lib := doc["nccl"].(map[string]any)
	assert.Equal(t, true, lib["loaded"])
	assert.Equal(t, float64(22907), lib["version_code"])
	assert.Equal(t, []any{map[string]any{"source": "NCCLGO_LIBNCCL", "path": "/opt/nccl/libnccl.so.2"}}, lib["attempts"])

	// Lists are always arrays, never null, so scripts can iterate them.
	cu := doc["cuda"].(map[string]any)
	assert.Equal(t, false, cu["loaded"])
	assert.Equal(t, []any{}, cu["attempts"])
	assert.Equal(t, "CUDA driver library not found: no candidate file", cu["error"])
	gpus := doc["gpus"].(map[string]any)
	assert.Equal(t, map[string]any{"count": float64(0), "devices": []any{}, "peers": []any{}, "error": "no CUDA driver loaded"}, gpus)

	env := doc["env"].([]any)
	assert.Len(t, env, 3)
	assert.Equal(t, map[string]any{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}, env[0])

	cov := doc["coverage"].([]any)
	require.Len(t, cov, 2)
	assert.Equal(t, map[string]any{"package": "raw/cuda", "library": "CUDA 13.0", "functions": float64(2), "present": float64(1),
		"missing": []any{map[string]any{"symbol": "cuMemBatchDecompressAsync", "since": "12.4.1"}}}, cov[1])
}

func TestModuleFromBuildInfo(t *testing.T) {
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Module
	}{
		{"no build info", nil, false, Module{Version: "unknown"}},
		{"inside the repository", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/ncclgo/ncclgo", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "0"}}},
			true, Module{Path: "github.com/ncclgo/ncclgo", Version: "(devel)", Go: "go1.26.0"}},
		{"a release", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/ncclgo/ncclgo", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "vcs.revision", Value: "abc"}}},
			true, Module{Path: "github.com/ncclgo/ncclgo", Version: "v1.2.3", Go: "go1.26.1", Cgo: true, Revision: "abc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := module(func() (*debug.BuildInfo, bool) { return tc.bi, tc.ok })
			assert.NotEmpty(t, got.Platform)
			got.Platform = ""
			if !tc.ok {
				assert.NotEmpty(t, got.Go)
				got.Go = ""
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestEnvironmentKeepsWhatChangesNCCL(t *testing.T) {
	got := environment([]string{"PATH=/bin", "NCCL_SOCKET_IFNAME=eth0", "NCCLGO_LIBCUDA=/x", "NCCL=1", "MY_NCCL_DEBUG=1",
		"LD_LIBRARY_PATH=/usr/local/cuda/lib64", "NCCL_DEBUG=", "CUDA_HOME=/usr/local/cuda"})
	assert.Equal(t, []EnvVar{
		{"CUDA_HOME", "/usr/local/cuda"}, {"LD_LIBRARY_PATH", "/usr/local/cuda/lib64"}, {"NCCLGO_LIBCUDA", "/x"},
		{"NCCL_DEBUG", ""}, {"NCCL_SOCKET_IFNAME", "eth0"},
	}, got)
}

func TestCoverageCountsMissingFunctions(t *testing.T) {
	tests := []struct {
		name    string
		syms    []symbolState
		err     error
		present int
		missing []Missing
	}{
		{"all present", []symbolState{{"a", "1", true}, {"b", "2", true}}, nil, 2, []Missing{}},
		{"some missing", []symbolState{{"a", "1", true}, {"b", "2", false}, {"c", "3", false}}, nil, 1, []Missing{{"b", "2"}, {"c", "3"}}},
		{"library not loaded", nil, errors.New("no libx found"), 0, []Missing{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := summarize("raw/x", "X 1", tc.syms, tc.err)
			assert.Equal(t, len(tc.syms), c.Functions)
			assert.Equal(t, tc.present, c.Present)
			assert.Equal(t, tc.missing, c.Missing)
			if tc.err != nil {
				assert.Equal(t, "no libx found", c.Error)
				assert.Equal(t, []string{"raw/x: unknown: no libx found"}, coverageLines(c))
			}
		})
	}
}

func TestCoverageLinesWrapLongLists(t *testing.T) {
	var syms []symbolState
	for _, name := range []string{"cuAlphaFunctionWithALongName", "cuBetaFunctionWithALongName", "cuGammaFunctionWithALongName", "cuDelta"} {
		syms = append(syms, symbolState{name, "12.4.1", false})
	}
	lines := coverageLines(summarize("raw/cuda", "CUDA 12.2", syms, nil))
	assert.Equal(t, []string{
		"raw/cuda: 0 of 4 functions present in CUDA 12.2; 4 missing (first pinned header declaring each):",
		"  cuAlphaFunctionWithALongName (12.4.1), cuBetaFunctionWithALongName (12.4.1)",
		"  cuGammaFunctionWithALongName (12.4.1), cuDelta (12.4.1)",
	}, lines)
}

// When nothing loads, the report says where ncclgo's cache has the libraries (with the
// variable to set) and how to get them on a real machine.
func TestHintWhenNothingLoads(t *testing.T) {
	s := fakeSources()
	notFound := func() nccl.LoadInfo {
		return nccl.LoadInfo{Library: "X", Err: errors.New("not found"),
			Attempts: []nccl.Attempt{{Source: "soname", Path: "libx.so", Err: errors.New("libx.so: cannot open shared object file")}}}
	}
	s.nccl, s.cuda = notFound, notFound
	s.environ = func() []string { return []string{"HOME=/home/u", "XDG_CACHE_HOME=/xdg"} }
	var globbed []string
	s.glob = func(p string) []string {
		globbed = append(globbed, p)
		if strings.Contains(p, "nccl-") {
			return []string{"/xdg/ncclgo/lib/nccl-2.29.7/libnccl.so.2", "/xdg/ncclgo/lib/nccl-2.22.3/libnccl.so.2"}
		}
		return nil
	}
	r := gather(s)
	assert.Equal(t, []string{"/xdg/ncclgo/lib/nccl-*/libnccl.so.2", "/xdg/ncclgo/lib/cuda-*/libcuda.so.1"}, globbed)
	var b bytes.Buffer
	require.NoError(t, writeText(&b, r))
	text := b.String()
	assert.Contains(t, text, "how to make it load:")
	assert.Contains(t, text, "    NCCLGO_LIBNCCL=/xdg/ncclgo/lib/nccl-2.22.3/libnccl.so.2\n")
	assert.Contains(t, text, "    NCCLGO_LIBNCCL=/xdg/ncclgo/lib/nccl-2.29.7/libnccl.so.2\n")
	assert.Contains(t, text, "pip install nvidia-nccl-cu12")
	assert.Contains(t, text, "ncclgo's cache (/xdg/ncclgo) has none; `make libs` fetches the copies the tests load")
	assert.Contains(t, text, "libcuda.so.1 comes with the NVIDIA driver")

	// A loaded library gets no hint.
	assert.Empty(t, gather(fakeSources()).NCCL.Hint)
}
