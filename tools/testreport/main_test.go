package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goTestOutput is `go test -v` on two packages, as go 1.26 prints it: nested and
// parallel subtests whose results come after their parent's, a skipped benchmark, a
// benchmark result line, a failing package.
const goTestOutput = `=== RUN   TestA
    x_test.go:3: hello
=== RUN   TestA/sub
    x_test.go:3: sub reason
=== RUN   TestA/par
=== PAUSE TestA/par
=== RUN   TestA/ok
    x_test.go:4: child TestA/ok:
        === RUN   TestA
        --- PASS: TestA (0.00s)
        PASS
=== CONT  TestA/par
    x_test.go:3: par reason
        line2
--- PASS: TestA (0.00s)
    --- SKIP: TestA/sub (0.00s)
    --- PASS: TestA/ok (0.00s)
    --- SKIP: TestA/par (0.00s)
goos: linux
BenchmarkS
    x_test.go:6: bench reason
--- SKIP: BenchmarkS
BenchmarkR-2     	      10	     18229 ns/op	         0.9000 add/copy	     135 B/op	       1 allocs/op
PASS
ok  	example.com/a	0.012s
?   	example.com/b	[no test files]
=== RUN   TestC
    c_test.go:5: bad
--- FAIL: TestC (0.00s)
FAIL
FAIL	example.com/c	0.004s
`

func TestGoTestSummaryCountsEverySkipAndFailsOnAFailure(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(nil, strings.NewReader(goTestOutput), &out, &errOut)
	assert.Equal(t, 1, code, errOut.String())
	s := out.String()
	assert.Contains(t, s, "ok  \texample.com/a\t0.012s\n", "go test's closing lines stay")
	assert.Contains(t, s, "?   \texample.com/b\t[no test files]\n")
	assert.Contains(t, s, "    c_test.go:5: bad\n--- FAIL: TestC (0.00s)\n", "a failed package's whole output")
	assert.NotContains(t, s, "x_test.go:3: hello", "a passing package's output is left out")
	assert.Contains(t, s, "2 passed, 1 failed, 3 skipped in all")
	assert.Contains(t, s, "    3 skipped     2 passed  example.com/a\n")
	assert.Contains(t, s, "        TestA/sub: sub reason\n")
	assert.Contains(t, s, "        TestA/par: par reason / line2\n")
	assert.Contains(t, s, "        BenchmarkS: bench reason\n")
	// A child process's results, logged by the test, are not the binary's own.
	assert.NotContains(t, s, "3 passed")
}

func TestAParentOfSkippedSubtestsSaysSo(t *testing.T) {
	in := "=== RUN   TestP\n=== RUN   TestP/a\n    p_test.go:3: why\n--- SKIP: TestP (0.00s)\n    --- SKIP: TestP/a (0.00s)\nPASS\nok  \tp\t0.1s\n"
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(nil, strings.NewReader(in), &out, &errOut))
	assert.Contains(t, out.String(), "        TestP: (nothing printed of its own: its subtests skipped)\n")
	assert.Contains(t, out.String(), "        TestP/a: why\n")
}

func TestGoTestSummaryPassesWithoutFailures(t *testing.T) {
	in := strings.Split(goTestOutput, "=== RUN   TestC")[0]
	var out, errOut bytes.Buffer
	assert.Equal(t, 0, run(nil, strings.NewReader(in), &out, &errOut), out.String())
	// Output cut before a package's closing line is a failure: the package did not finish.
	out.Reset()
	assert.Equal(t, 1, run(nil, strings.NewReader(in+"=== RUN   TestD\n"), &out, &errOut))
	assert.Contains(t, out.String(), "the output ended before go test's closing line")
	// A wrapper's own line after the last package is shown and not judged.
	out.Reset()
	assert.Equal(t, 0, run(nil, strings.NewReader(in+"cpuload: 2 threads spun 5 million loops while go ran\n"), &out, &errOut), out.String())
	assert.Contains(t, out.String(), "cpuload: 2 threads spun")
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
