package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

const childEnv = "NCCLGO_TESTENV_CHILD"

// TestChildSeesVariables is what the repository's subprocess tests do: it runs the test
// binary again as a child with Environ and reads what the child read. Run by itself it is
// the test TestChangingAChildsVariableRerunsTheTest runs through go test.
func TestChildSeesVariables(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		os.Stdout.WriteString("child cache=" + os.Getenv("NCCLGO_CACHE") + "\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildSeesVariables$", "-test.count=1")
	cmd.Env = append(testenv.Environ(), childEnv+"=1", "NCCLGO_CACHE=/child/sees/this")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "child cache=/child/sees/this\n")
}

// TestChangingAChildsVariableRerunsTheTest runs TestChildSeesVariables through go test
// twice with the same environment (the second run is replayed from go test's cache, as
// go test does) and then once with each variable a test's children read changed: none of
// those may be replayed.
func TestChangingAChildsVariableRerunsTheTest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	goBin, err := exec.LookPath("go") // go test puts the go command that runs it first on PATH
	if err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatal("no go command on PATH (NCCLGO_STRICT is set: a missing tool fails)")
		}
		t.Skip("no go command on PATH")
	}
	base := []string{"NCCLGO_CACHE=" + filepath.Join(t.TempDir(), "cache"), "NCCLGO_STRICT=", "NCCLGO_TORCH2_ROOT=", "NCCL_DEBUG="}
	// GOFLAGS set (over go env's file too) to a flag that leaves the cache on: a
	// -count=1 there would turn it off.
	env := []string{"GOFLAGS=-buildvcs=false"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	goTest := func(vars ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, "test", "-run=^TestChildSeesVariables$", ".")
		cmd.Env = append(append(append([]string{}, env...), base...), vars...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go test %v:\n%s", vars, out)
		return string(out)
	}
	goTest()
	require.Contains(t, goTest(), "(cached)", "the same environment again is replayed from go test's cache")
	for _, v := range []string{
		"NCCLGO_CACHE=" + filepath.Join(t.TempDir(), "other"),
		"NCCLGO_STRICT=1",
		"NCCLGO_TORCH2_ROOT=" + t.TempDir(),
		"NCCL_DEBUG=INFO",
		"PATH=" + t.TempDir() + string(os.PathListSeparator) + os.Getenv("PATH"), // where mpirun, torchrun, python3 are found
	} {
		assert.NotContains(t, goTest(v), "(cached)", "go test replayed a result after %s changed", v)
	}
}

func TestFailureExcerpt(t *testing.T) {
	out := "=== RUN   TestX\nok line\npanic: runtime error: index out of range [4] with length 4\n\ngoroutine 7 [running]:\nmain.f()\n" +
		strings.Repeat("frame\n", 40) + "--- FAIL: TestX\nmpirun trailer\n"
	got := testenv.FailureExcerpt(out)
	assert.True(t, strings.HasPrefix(got, "\nfirst failure in the output above:\npanic: runtime error: index out of range"), got)
	assert.Len(t, strings.Split(got, "\n"), 2+24)
	assert.Empty(t, testenv.FailureExcerpt("=== RUN   TestX\n--- PASS: TestX (0.00s)\n"))

	// A Python exception: up to its exception line, the last frames kept when long.
	py := "OK 2.14\nTraceback (most recent call last):\n" + strings.Repeat("  File \"x.py\", line 1, in f\n    f()\n", 20) +
		"  File \"x.py\", line 9, in g\n    raise RuntimeError(\"no store\")\nRuntimeError: no store\nafter the exception\n"
	got = testenv.FailureExcerpt(py)
	lines := strings.Split(got, "\n")
	assert.Len(t, lines, 2+24, got)
	assert.Equal(t, "Traceback (most recent call last):", lines[2])
	assert.Equal(t, "  ...", lines[3])
	assert.Equal(t, "RuntimeError: no store", lines[len(lines)-1], got)
	short := testenv.FailureExcerpt("Traceback (most recent call last):\n  File \"x.py\", line 9, in g\n    g()\nKeyError: 'k'\nnext\n")
	assert.Equal(t, "\nfirst failure in the output above:\nTraceback (most recent call last):\n  File \"x.py\", line 9, in g\n    g()\nKeyError: 'k'", short)
}
