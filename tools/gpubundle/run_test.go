// Package gpubundle holds the tests of the GPU bundle's scripts (build.sh, run.sh): run.sh
// is run on fake bundles whose test binaries pass, fail, skip, hang, ignore SIGTERM and
// print benchmarks, and what it records is checked.
package gpubundle

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureSource is a real Go test package; its binary behaves as its file name says
// (pass.test, fail.test, ...), so that one build serves every fake package.
const fixtureSource = `package fixture

import (
	"flag"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mode() string { return strings.TrimSuffix(filepath.Base(os.Args[0]), ".test") }

func TestMain(m *testing.M) {
	flag.Parse()
	if mode() != "bench" {
		flag.Set("test.bench", "")
	}
	if d := os.Getenv("FIXTURE_PIDS"); d != "" {
		os.WriteFile(filepath.Join(d, mode()+"."+os.Getenv("NCCLGO_GPU_WORLD")+".pid"), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	os.Exit(m.Run())
}

func TestGPUFake(t *testing.T) {
	t.Logf("world=%s multi=%s libcuda=%s libnccl=%s", os.Getenv("NCCLGO_GPU_WORLD"), os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE"), os.Getenv("NCCLGO_LIBCUDA"), os.Getenv("NCCLGO_LIBNCCL"))
	switch mode() {
	case "pass", "bench":
		t.Run("sub", func(t *testing.T) {
			t.Run("deeper", func(t *testing.T) { t.Skip("nested reason") })
		})
		t.Run("parallel", func(t *testing.T) { t.Parallel() })
	case "fail":
		t.Error("broken on purpose")
	case "skip":
		t.Skip("no usable GPU: fake driver")
	case "hang":
		child := exec.Command("sleep", "3600")
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		if d := os.Getenv("FIXTURE_PIDS"); d != "" {
			os.WriteFile(filepath.Join(d, "hang-child.pid"), []byte(strconv.Itoa(child.Process.Pid)), 0o644)
		}
		time.Sleep(time.Hour)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Hour)
	}
}

func TestGPUConformanceRealNCCL(t *testing.T) {
	t.Logf("conformance world=%s multi=%s", os.Getenv("NCCLGO_GPU_WORLD"), os.Getenv("NCCL_MULTI_RANK_GPU_ENABLE"))
	if mode() == "skip" {
		t.Skip("no usable GPU: fake driver")
	}
}

func BenchmarkGPUAddBF16VersusCopy(b *testing.B) {
	for range b.N {
	}
	b.ReportMetric(0.91, "add/copy")
}

func BenchmarkGPUAllReduceCommVsRaw(b *testing.B) {
	b.Run("8B", func(b *testing.B) {
		for range b.N {
		}
		b.ReportMetric(1.2, "comm/raw")
	})
}

func BenchmarkGPUTwoRankPathVsNCCL(b *testing.B) {
	for _, c := range []struct {
		name  string
		ratio float64
	}{{"4096B", 0.5}, {"524288B", 0.8}, {"1048576B", 0.9}, {"2097152B", 1.1}, {"67108864B", 1.6}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
			}
			b.ReportMetric(c.ratio, "path/nccl")
		})
	}
}
`

var fixture string // the built fixture test binary

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpubundle-fixture")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		src := fixtureSource
		if err := errors.Join(os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fixture\n\ngo 1.24\n"), 0o644),
			os.WriteFile(filepath.Join(dir, "fixture_test.go"), []byte(src), 0o644)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fixture = filepath.Join(dir, "fixture.test")
		cmd := exec.Command("go", "test", "-c", "-o", fixture, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the fixture test binary: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// tool builds the command pkg (a path or a standard command such as cmd/test2json) once.
func tool(name, pkg string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		out := filepath.Join(filepath.Dir(fixture), name)
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		return out, nil
	})
}

var (
	testreport = tool("testreport", "../testreport")
	test2json  = tool("test2json", "cmd/test2json")
)

// bundle lays out a fake GPU bundle: one test binary per package (a link to the fixture
// named after its behaviour), shell scripts as ncclinfo (reporting ncclVersion) and
// commbench (exiting benchExit), and run.sh with the real testreport and test2json.
type bundle struct {
	dir, out, pids, fakebin string
}

func newBundle(t *testing.T, ncclVersion string, benchExit int, pkgs ...[2]string) *bundle {
	t.Helper()
	tr, err := testreport()
	require.NoError(t, err)
	root := t.TempDir()
	b := &bundle{dir: filepath.Join(root, "bundle"), out: filepath.Join(root, "out"), pids: filepath.Join(root, "pids"), fakebin: filepath.Join(root, "fakebin")}
	for _, d := range []string{"tests", "bin"} {
		require.NoError(t, os.MkdirAll(filepath.Join(b.dir, d), 0o755))
	}
	require.NoError(t, os.MkdirAll(b.pids, 0o755))
	require.NoError(t, os.MkdirAll(b.fakebin, 0o755))
	var list strings.Builder
	for _, p := range pkgs { // {package, mode}
		name := strings.ReplaceAll(strings.TrimPrefix(p[0], "./"), "/", "_")
		// A folder per package holds the link named after the mode the fixture reads.
		dir := filepath.Join(b.dir, "tests", name+".d")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.Symlink(fixture, filepath.Join(dir, p[1]+".test")))
		script := fmt.Sprintf("#!/bin/sh\nexec %q \"$@\"\n", filepath.Join(dir, p[1]+".test"))
		writeExec(t, filepath.Join(b.dir, "tests", name+".test"), script)
		fmt.Fprintf(&list, "%s %s\n", name, p[0])
	}
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "tests", "packages.txt"), []byte(list.String()), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "MANIFEST"), []byte("built: 2026-12-01T00:00:00Z\ncommit: 0123abc (dirty)\n"), 0o644))
	writeExec(t, filepath.Join(b.dir, "bin", "ncclinfo"), fmt.Sprintf("#!/bin/sh\necho 'NCCL        NCCL %s'\necho 'CUDA        CUDA 13.0'\n", ncclVersion))
	writeExec(t, filepath.Join(b.dir, "bin", "commbench"), fmt.Sprintf("#!/bin/sh\necho \"# commbench $*\"\necho '   8  2  float  sum  -1  10.0  0.00  0.00  0'\nexit %d\n", benchExit))
	t2j, err := test2json()
	require.NoError(t, err)
	for name, src := range map[string]string{"testreport": tr, "test2json": t2j} {
		data, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(b.dir, "bin", name), data, 0o755))
	}
	script, err := os.ReadFile("run.sh")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "run.sh"), script, 0o755))
	// No python3 with a pip NCCL, no ldconfig entry, no nvidia-smi: the machine of CI.
	writeExec(t, filepath.Join(b.fakebin, "python3"), "#!/bin/sh\nexit 1\n")
	writeExec(t, filepath.Join(b.fakebin, "ldconfig"), "#!/bin/sh\nexit 0\n")
	writeExec(t, filepath.Join(b.fakebin, "nvidia-smi"), "#!/bin/sh\nexit 127\n")
	return b
}

func writeExec(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o755))
}

// env is the environment of a run: short limits, the fake tools first on PATH.
func (b *bundle) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NCCL") || strings.HasPrefix(k, "CUDA") || k == "VIRTUAL_ENV" || k == "CONDA_PREFIX" || k == "LD_LIBRARY_PATH" || k == "PATH" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+b.fakebin+":"+os.Getenv("PATH"), "FIXTURE_PIDS="+b.pids,
		"NCCLGO_GPU_BUDGET=200", "NCCLGO_GPU_TEST_TIMEOUT=6", "NCCLGO_GPU_BENCH_TIMEOUT=5", "NCCLGO_GPU_KILL_AFTER=1",
		"NCCLGO_GPU_BENCHTIME=1x", "NCCLGO_GPU_LIBCUDA_DIRS="+filepath.Join(b.dir, "nolib"))
	return append(env, extra...)
}

// run runs the bundle's run.sh and returns its exit status and standard output.
func (b *bundle) run(t *testing.T, extra ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(b.dir, "run.sh"), b.out)
	cmd.Env = b.env(extra...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.String()
	}
	require.NoError(t, err, stdout.String())
	return 0, stdout.String()
}

func (b *bundle) file(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.out, name))
	require.NoError(t, err)
	return string(data)
}

// requireLine fails t unless text has a line matching the regular expression re.
func requireLine(t *testing.T, text, re string) {
	t.Helper()
	require.Regexp(t, regexp.MustCompile("(?m)"+re), text)
}

// requireGone fails t unless every process whose pid a fixture wrote under pids is gone.
func requireGone(t *testing.T, pids string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(pids, "*.pid"))
	require.NoError(t, err)
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		require.NoError(t, err)
		// A killed child may linger as a zombie until its parent reaps it; a live
		// process answers signal 0 and is not a zombie.
		deadline := time.Now().Add(30 * time.Second)
		for alive(pid) {
			require.True(t, time.Now().Before(deadline), "process %d (%s) still runs", pid, filepath.Base(f))
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestRunJudgesEveryKindOfStep(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.29.7", 0,
		[2]string{"./raw/cuda", "pass"}, [2]string{"./raw/nccl", "skip"}, [2]string{"./kernels", "bench"},
		[2]string{"./comm", "fail"}, [2]string{"./comm/commtest", "hang"}, [2]string{"./tools/ncclinfo", "stubborn"})
	code, stdout := b.run(t)
	assert.Equal(t, 1, code, stdout)
	sum := b.file(t, "summary.txt")
	requireLine(t, sum, `^verdict: FAIL`)
	requireLine(t, sum, `^  ok +\./raw/cuda +4 passed +0 failed +1 skipped`)
	requireLine(t, sum, `^  skipped +\./raw/nccl +0 passed +0 failed +2 skipped`)
	requireLine(t, sum, `^  ok +\./kernels +4 passed`)
	requireLine(t, sum, `^  FAIL\(1\) +\./comm +1 passed +1 failed`)
	requireLine(t, sum, `^  timeout +\./comm/commtest `)
	requireLine(t, sum, `^  timeout +\./tools/ncclinfo `)
	requireLine(t, sum, `^  ok +commbench -g 1 `)
	requireLine(t, sum, `^multi-rank: no: NCCL 2\.29\.7 refuses two ranks on one GPU`)
	assert.NotContains(t, sum, "(2 ranks)", "no multi-rank step without NCCL 2.30")

	rec := b.file(t, "record.md")
	requireLine(t, rec, `^#### Skips \(4\)$`)
	requireLine(t, rec, "^- `./raw/cuda` TestGPUFake/sub/deeper: nested reason$")
	requireLine(t, rec, "^- `./kernels` TestGPUFake/sub/deeper: nested reason$")
	requireLine(t, rec, "^- `./raw/nccl` TestGPUFake: world= multi= libcuda= libnccl= / no usable GPU: fake driver$")
	requireLine(t, rec, "^- `./comm` TestGPUFake: .*broken on purpose$")
	// The row counts top-level tests of test binaries only: no benchmark, no commbench.
	requireLine(t, rec, `^\| \d{4}-\d\d-\d\d \| none \| - \| CUDA 13\.0 \| NCCL 2\.29\.7 \| 0123abc \(dirty\) \| \./raw/cuda ok 2/2, \./raw/nccl skipped 0/2, \./kernels ok 2/2, \./comm FAIL\(1\) 1/2, \./comm/commtest timeout 0/0, \./tools/ncclinfo timeout 0/0 \|$`)
	requireLine(t, rec, `^\| kernels: bf16 add bandwidth >= 0\.85 .* \| add/copy 0\.910 \| PASS \|$`)
	requireLine(t, rec, `^\| comm: 8-byte all-reduce <= 1\.05 .* \| comm/raw 1\.200 \| FAIL \|$`)
	requireLine(t, rec, `^\| two-rank path .* path faster up to 1 MiB \| PASS .*\|$`)
	requireLine(t, rec, `^Libraries: libcuda not found \(soname, .*nolib\); libnccl <loader search`)
	// Output is in OUT as it came, framed per step.
	tests := b.file(t, "tests.txt")
	requireLine(t, tests, `^### end \./comm/commtest exit=124 seconds=\d+ limit=6$`)
	requireLine(t, tests, `^### end \./tools/ncclinfo exit=137 `)
	requireGone(t, b.pids)
}

func TestRunPassesOnlyWhenEveryStepPasses(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.30.3", 0, [2]string{"./raw/cuda", "pass"}, [2]string{"./comm/commtest", "pass"})
	code, stdout := b.run(t)
	assert.Equal(t, 0, code, stdout)
	sum := b.file(t, "summary.txt")
	requireLine(t, sum, `^verdict: PASS`)
	requireLine(t, sum, `^multi-rank: yes: NCCL 2\.30\.3 >= 2\.30 with NCCL_MULTI_RANK_GPU_ENABLE=1`)
	for _, step := range []string{`\./raw/cuda`, `\./comm/commtest`, `\./comm/commtest \(2 ranks\)`, `\./comm/commtest \(4 ranks\)`, `commbench -g 1`, `commbench -g 2`, `commbench -g 4`} {
		requireLine(t, sum, `^  ok +`+step+` `)
	}
	tests := b.file(t, "tests.txt")
	// tests.txt holds the events: what a test printed is an Output string.
	requireLine(t, tests, `"Package":"\./comm/commtest \(4 ranks\)".*"Output":".*conformance world=4 multi=1\\n"}$`)
	requireLine(t, tests, `"Package":"\./comm/commtest \(2 ranks\)".*"Output":".*conformance world=2 multi=1\\n"}$`)
	requireLine(t, tests, `"Output":"    .*: world= multi=1 `)
	bench := b.file(t, "commbench.txt")
	requireLine(t, bench, `^# commbench -g 4 -op allreduce -b 8 -e 256M -f 2 -T \d+s$`)

	// The same bundle whose commbench fails: the run fails.
	writeExec(t, filepath.Join(b.dir, "bin", "commbench"), "#!/bin/sh\necho 'out of memory'\nexit 3\n")
	code, stdout = b.run(t)
	assert.Equal(t, 1, code, stdout)
	requireLine(t, b.file(t, "summary.txt"), `^  FAIL\(3\) +commbench -g 1 `)

	// Without bin/testreport the record still says what ran and fails.
	require.NoError(t, os.Remove(filepath.Join(b.dir, "bin", "testreport")))
	code, stdout = b.run(t)
	assert.Equal(t, 1, code, stdout)
	rec := b.file(t, "record.md")
	requireLine(t, rec, `^\*\*FAIL: the run could not be judged`)
	requireLine(t, rec, `^### end \./raw/cuda exit=0 `)
	requireLine(t, rec, `^### end commbench -g 1 exit=3 `)
}

// TestRunUnpacksCompressedTestBinaries runs a bundle whose test binaries are gzipped, as
// build.sh leaves them: each is unpacked into a temporary folder before its step, the
// folder is gone afterwards, and a binary that does not unpack fails its step.
func TestRunUnpacksCompressedTestBinaries(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.30.3", 0, [2]string{"./raw/cuda", "pass"}, [2]string{"./comm/commtest", "pass"})
	for _, name := range []string{"raw_cuda", "comm_commtest"} {
		gzipFile(t, filepath.Join(b.dir, "tests", name+".test"))
	}
	tmp := t.TempDir()
	code, stdout := b.run(t, "TMPDIR="+tmp)
	assert.Equal(t, 0, code, stdout)
	sum := b.file(t, "summary.txt")
	requireLine(t, sum, `^verdict: PASS`)
	for _, step := range []string{`\./raw/cuda +4 passed`, `\./comm/commtest +4 passed`, `\./comm/commtest \(4 ranks\)`} {
		requireLine(t, sum, `^  ok +`+step)
	}
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the unpacked binaries are removed")

	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "tests", "raw_cuda.test.gz"), []byte("not gzip"), 0o644))
	code, stdout = b.run(t, "TMPDIR="+tmp)
	assert.Equal(t, 1, code, stdout)
	assert.Contains(t, stdout, "cannot unpack")
	requireLine(t, b.file(t, "summary.txt"), `^  FAIL\(\d+\) +\./raw/cuda `)
	requireLine(t, b.file(t, "summary.txt"), `^  ok +\./comm/commtest +4 passed`)
}

// gzipFile replaces path with path.gz, its gzip.
func gzipFile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err = zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(path+".gz", buf.Bytes(), 0o644))
	require.NoError(t, os.Remove(path))
}

func TestRunKeepsItsBudget(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.29.7", 0, [2]string{"./raw/cuda", "hang"}, [2]string{"./raw/nccl", "pass"})
	// 28 s in all, 1 kept for commbench: the first binary starts with at least 20 left
	// (setup takes under 7 s even on a loaded machine) and hangs for its 10 s, after which
	// fewer than 20 are left.
	code, stdout := b.run(t, "NCCLGO_GPU_BUDGET=28", "NCCLGO_GPU_BENCH_TIMEOUT=1", "NCCLGO_GPU_TEST_TIMEOUT=10")
	assert.Equal(t, 1, code, stdout)
	sum := b.file(t, "summary.txt")
	requireLine(t, sum, `^  timeout +\./raw/cuda `)
	requireLine(t, sum, `^  not run +\./raw/nccl .*time budget spent`)
	requireLine(t, sum, `^  not run +commbench `)
	requireGone(t, b.pids)
}

func TestRunLeavesARecordWhenStopped(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.29.7", 0, [2]string{"./raw/cuda", "pass"}, [2]string{"./raw/nccl", "hang"}, [2]string{"./kernels", "pass"})
	cmd := exec.Command(filepath.Join(b.dir, "run.sh"), b.out)
	cmd.Env = b.env("NCCLGO_GPU_TEST_TIMEOUT=120")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	require.NoError(t, cmd.Start())
	// Wait until the hanging binary runs (its child's pid is written), then stop the run.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(b.pids, "hang-child.pid")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the hanging step did not start within 60 s:\n%s", stdout.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stdout.String())
	assert.Equal(t, 143, ee.ExitCode(), stdout.String())
	sum := b.file(t, "summary.txt")
	requireLine(t, sum, `^verdict: FAIL: the run was interrupted \(SIGTERM during \./raw/nccl after \d+s\)`)
	requireLine(t, sum, `^  ok +\./raw/cuda `)
	requireLine(t, sum, `^  interrupted +\./raw/nccl `)
	assert.NotContains(t, sum, "./kernels")
	requireLine(t, b.file(t, "record.md"), `^\*\*FAIL: the run was interrupted`)
	requireGone(t, b.pids)
}

func TestRunFindsTheLibraries(t *testing.T) {
	t.Parallel()
	b := newBundle(t, "2.29.7", 0, [2]string{"./raw/cuda", "pass"})
	root := filepath.Dir(b.dir)
	// libcuda: not through the soname (the fake ldconfig knows none), in the second folder.
	second := filepath.Join(root, "drv2")
	require.NoError(t, os.MkdirAll(second, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(second, "libcuda.so.1"), nil, 0o644))
	dirs := "NCCLGO_GPU_LIBCUDA_DIRS=" + filepath.Join(root, "drv1") + " " + second

	t.Run("pip NCCL through python3", func(t *testing.T) {
		lib := filepath.Join(root, "wheel", "nvidia", "nccl", "lib", "libnccl.so.2")
		require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
		require.NoError(t, os.WriteFile(lib, nil, 0o644))
		writeExec(t, filepath.Join(b.fakebin, "python3"), "#!/bin/sh\necho "+lib+"\n")
		code, stdout := b.run(t, dirs)
		assert.Equal(t, 0, code, stdout)
		env := b.file(t, "env.txt")
		requireLine(t, env, `^libcuda: `+regexp.QuoteMeta(filepath.Join(second, "libcuda.so.1"))+` \(the soname did not resolve; set as NCCLGO_LIBCUDA\)$`)
		requireLine(t, env, `^libnccl: `+regexp.QuoteMeta(lib)+` \(pip NCCL of .*fakebin/python3\)$`)
		requireLine(t, b.file(t, "tests.txt"), `libcuda=`+regexp.QuoteMeta(filepath.Join(second, "libcuda.so.1"))+` libnccl=`+regexp.QuoteMeta(lib)+`\\n"}$`)
	})
	t.Run("site-packages without a python3 that knows it", func(t *testing.T) {
		venv := filepath.Join(root, "venv")
		lib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib", "libnccl.so.2")
		require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
		require.NoError(t, os.WriteFile(lib, nil, 0o644))
		writeExec(t, filepath.Join(b.fakebin, "python3"), "#!/bin/sh\nexit 1\n")
		b.run(t, dirs, "VIRTUAL_ENV="+venv)
		requireLine(t, b.file(t, "env.txt"), `^libnccl: `+regexp.QuoteMeta(lib)+` \(site-packages folder\)$`)
	})
	t.Run("the soname through the ld.so cache", func(t *testing.T) {
		writeExec(t, filepath.Join(b.fakebin, "ldconfig"), "#!/bin/sh\necho '\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1'\n")
		b.run(t, dirs)
		requireLine(t, b.file(t, "env.txt"), `^libcuda: /usr/lib/x86_64-linux-gnu/libcuda\.so\.1 \(soname, through the ld\.so cache\)$`)
		requireLine(t, b.file(t, "tests.txt"), `libcuda= `)
	})
}
