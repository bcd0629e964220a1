package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tinyModule is a module of small packages whose `go test -json` output the tests read:
// nested and parallel subtests whose results come after their parent's, a test that logs
// a child process's results, skipped and measured benchmarks, a package without tests, a
// failing package, a test binary that dies, one that times out and a package that does
// not build.
var tinyModule = map[string]string{
	"go.mod": "module example.com/tiny\n\ngo 1.22\n",
	"a/a_test.go": `package a

import "testing"

func TestA(t *testing.T) {
	t.Log("hello")
	t.Run("sub", func(t *testing.T) { t.Skip("sub reason") })
	t.Run("par", func(t *testing.T) { t.Parallel(); t.Skip("par reason\nline2") })
	t.Run("ok", func(t *testing.T) { t.Log("child TestA/ok:\n=== RUN   TestA\n--- PASS: TestA (0.00s)\nPASS") })
}

func BenchmarkS(b *testing.B) { b.Skip("bench reason") }

func BenchmarkR(b *testing.B) {
	for range b.N {
	}
	b.ReportMetric(0.9, "add/copy")
}
`,
	"b/b.go": "package b\n",
	"c/c_test.go": `package c

import "testing"

func TestC(t *testing.T) { t.Error("bad") }
`,
	"p/p_test.go": `package p

import "testing"

func TestP(t *testing.T) {
	t.Run("a", func(t *testing.T) { t.Skip("why") })
	t.SkipNow()
}
`,
	"hang/hang_test.go": `package hang

import (
	"testing"
	"time"
)

func TestHangs(t *testing.T) { time.Sleep(time.Hour) }
`,
	"crash/crash_test.go": `package crash

import (
	"os"
	"testing"
)

func TestDies(t *testing.T) { os.Exit(3) }
`,
	"broken/broken_test.go": `package broken

import "testing"

func TestBroken(t *testing.T) { undefinedName() }
`,
}

var (
	tinyOnce sync.Once
	tinyJSON []byte
	tinyErr  error
)

// tinyEvents is `go test -json` on tinyModule's packages, run once (with the go command
// that runs this test, which go test puts first on PATH): the lines of the events of the
// named packages (all when none are named), in order.
func tinyEvents(t *testing.T, pkgs ...string) string {
	t.Helper()
	tinyOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testreport")
		if err != nil {
			tinyErr = err
			return
		}
		defer os.RemoveAll(dir)
		for name, text := range tinyModule {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				tinyErr = err
				return
			}
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				tinyErr = err
				return
			}
		}
		// The package that does not build is tested on its own: with -bench, go test
		// fails the packages after a build failure without running them.
		for _, args := range [][]string{{"-bench", ".", "-benchtime", "1x", "./a", "./b", "./c", "./p", "./crash"}, {"./broken"}, {"-timeout", "1s", "./hang"}} {
			cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, args...)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local", "GOPROXY=off")
			out, err := cmd.Output() // go test exits 1: packages fail
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				tinyErr = err
				return
			}
			tinyJSON = append(tinyJSON, out...)
		}
	})
	require.NoError(t, tinyErr)
	var out strings.Builder
	for _, l := range strings.SplitAfter(string(tinyJSON), "\n") {
		var e event
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		path, _, _ := strings.Cut(e.ImportPath, " ")
		if len(pkgs) == 0 || slices.Contains(pkgs, "example.com/tiny/"+e.Package) || slices.Contains(pkgs, "example.com/tiny/"+path) ||
			slices.Contains(pkgs, strings.TrimPrefix(e.Package, "example.com/tiny/")) || slices.Contains(pkgs, strings.TrimPrefix(path, "example.com/tiny/")) {
			out.WriteString(l)
		}
	}
	require.NotEmpty(t, out.String(), "no events of %v in:\n%s", pkgs, tinyJSON)
	return out.String()
}

func TestGoTestSummaryCountsEverySkipAndFailsOnAFailure(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(nil, strings.NewReader(tinyEvents(t)), &out, &errOut)
	assert.Equal(t, 1, code, errOut.String())
	s := out.String()
	assert.Regexp(t, "(?m)^ok  \texample.com/tiny/a\t[0-9.]+s$", s, "go test's closing lines stay")
	assert.Contains(t, s, "?   \texample.com/tiny/b\t[no test files]\n")
	assert.Contains(t, s, "    c_test.go:5: bad\n--- FAIL: TestC (0.00s)\n", "a failed package's whole output")
	assert.Regexp(t, "(?m)^FAIL\texample.com/tiny/c\t[0-9.]+s$", s)
	assert.NotContains(t, s, "a_test.go:6: hello", "a passing package's output is left out")
	// a: TestA, TestA/ok passed; TestA/sub, TestA/par, BenchmarkS skipped. c: TestC
	// failed. p: TestP, TestP/a skipped. crash: TestDies never ended.
	assert.Contains(t, s, "2 passed, 1 failed, 5 skipped in all")
	assert.Contains(t, s, "    2 skipped     0 passed  example.com/tiny/p\n")
	assert.Contains(t, s, "    3 skipped     2 passed  example.com/tiny/a\n")
	assert.Contains(t, s, "        TestA/sub: sub reason\n")
	assert.Contains(t, s, "        TestA/par: par reason / line2\n")
	assert.Contains(t, s, "        BenchmarkS: bench reason\n")
	// A child process's results, logged by the test, are not the binary's own.
	assert.NotContains(t, s, "3 passed")
	// A test binary that dies fails its package; so does a package that does not build,
	// shown with the compiler's message.
	assert.Regexp(t, "(?m)^FAIL\texample.com/tiny/crash\t", s)
	assert.Regexp(t, "(?m)^FAIL\texample.com/tiny/hang\t", s)
	assert.Contains(t, s, "panic: test timed out after 1s")
	assert.Contains(t, s, "FAIL\texample.com/tiny/broken [build failed]\n")
	assert.Contains(t, s, "undefined: undefinedName")
}

func TestAParentOfSkippedSubtestsSaysSo(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(nil, strings.NewReader(tinyEvents(t, "p")), &out, &errOut), out.String())
	assert.Contains(t, out.String(), "        TestP: (nothing printed of its own: its subtests skipped)\n")
	assert.Contains(t, out.String(), "        TestP/a: why\n")
}

func TestGoTestSummaryPassesWithoutFailures(t *testing.T) {
	in := tinyEvents(t, "a", "b")
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run(nil, strings.NewReader(in), &out, &errOut), out.String())
	// A wrapper's own line after the last package is shown and not judged.
	out.Reset()
	assert.Equal(t, 0, run(nil, strings.NewReader(in+"cpuload: 2 threads spun 5 million loops while go ran\n"), &out, &errOut), out.String())
	assert.Contains(t, out.String(), "cpuload: 2 threads spun")
}

func TestOutputThatEndsEarlyFailsThePackage(t *testing.T) {
	in := tinyEvents(t, "b") + tinyEvents(t, "a")
	// Cut the stream before a's final event: the package did not finish.
	last := strings.LastIndex(in, `"Action":"pass","Package":"example.com/tiny/a"`)
	require.Positive(t, last)
	cut := in[:strings.LastIndex(in[:last], "\n")+1]
	var out, errOut bytes.Buffer
	assert.Equal(t, 1, run(nil, strings.NewReader(cut), &out, &errOut), out.String())
	assert.Contains(t, out.String(), "FAIL\texample.com/tiny/a: the output ended before go test's closing line")
	assert.Contains(t, out.String(), "?   \texample.com/tiny/b\t[no test files]\n", "the packages that ended are reported as before")
	// Cut inside a test's run: the same.
	out.Reset()
	mid := strings.Index(in, `"Action":"run","Package":"example.com/tiny/a","Test":"TestA/ok"`)
	require.Positive(t, mid)
	assert.Equal(t, 1, run(nil, strings.NewReader(in[:strings.LastIndex(in[:mid], "\n")+1]), &out, &errOut), out.String())
	assert.Contains(t, out.String(), "FAIL\texample.com/tiny/a: the output ended before go test's closing line")
}

func TestGPUStepsAreJudgedFromTheirEvents(t *testing.T) {
	// The GPU bundle's run frames each test binary's events (bin/test2json's, the same as
	// go test -json's) between step lines.
	frame := func(name, events, end string) string {
		return "### step test " + name + "\n" + events + end
	}
	in := frame("./a", tinyEvents(t, "a"), "### end ./a exit=0 seconds=1 limit=90\n") +
		frame("./p", tinyEvents(t, "p"), "### end ./p exit=0 seconds=1 limit=90\n") +
		frame("./c", tinyEvents(t, "c"), "### end ./c exit=1 seconds=1 limit=90\n") +
		frame("./hang", tinyEvents(t, "hang"), "### end ./hang exit=1 seconds=1 limit=90\n") +
		"### notrun ./late -- time budget spent\n" +
		frame("./cut", tinyEvents(t, "a"), "")
	steps, err := parseSteps(strings.NewReader(in))
	require.NoError(t, err)
	var got []string
	for _, s := range steps {
		got = append(got, s.name+" "+s.status())
	}
	// The binary's -test.timeout fired in ./hang; ./cut's run was stopped before its end.
	assert.Equal(t, []string{"./a ok", "./p skipped", "./c FAIL(1)", "./hang timeout", "./late not run", "./cut interrupted"}, got)
	pass, _ := steps[0].count("PASS")
	skip, _ := steps[0].count("SKIP")
	assert.Equal(t, []int{2, 3}, []int{pass, skip})
	require.Len(t, steps[0].benchmarks, 1, "the benchmark line, printed in two events, is one line")
	v, ok := metric(steps[0].benchmarks[0], "add/copy")
	require.True(t, ok)
	assert.InDelta(t, 0.9, v, 1e-9)
}

func TestBenchmarkLines(t *testing.T) {
	line := "BenchmarkGPUAllReduceCommVsRaw/8B-16   \t   12000\t     9000 ns/op\t  9100 comm-ns/op\t 1.031 comm/raw\t 0 B/op"
	assert.Equal(t, "BenchmarkGPUAllReduceCommVsRaw/8B", benchBase(line))
	v, ok := metric(line, "comm/raw")
	require.True(t, ok)
	assert.InDelta(t, 1.031, v, 1e-9)
	_, ok = metric(line, "path/nccl")
	assert.False(t, ok)
}

func TestCrossoverVerdicts(t *testing.T) {
	steps := func(ratios ...string) []*step {
		b := &block{}
		sizes := []int{4 << 10, 512 << 10, 1 << 20, 2 << 20, 64 << 20}
		for i, r := range ratios {
			b.benchmarks = append(b.benchmarks, "BenchmarkGPUTwoRankPathVsNCCL/"+strconv.Itoa(sizes[i])+"B-16 \t 100\t 5 ns/op\t "+r+" path/nccl")
		}
		return []*step{{kind: "test", block: b, ended: true}}
	}
	assert.Contains(t, judgeCrossover(steps("0.5", "0.8", "0.9", "1.1", "1.5")).verdict, "PASS")
	assert.Contains(t, judgeCrossover(steps("0.5", "1.2", "1.3", "1.4", "1.5")).verdict, "FAIL (the measured threshold is 4 KiB")
	never := judgeCrossover(steps("1.5", "1.2", "1.3", "1.4", "1.5"))
	assert.Contains(t, never.verdict, "FAIL (the 1 MiB default is wrong here")
	assert.Contains(t, never.measured, "4 KiB 1.50, 512 KiB 1.20")
	assert.Equal(t, "not measured", judgeCrossover(nil).verdict)
}
