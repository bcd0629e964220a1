// Package dltest helps the tests of raw/nccl and raw/cuda load the real NVIDIA libraries
// that `make libs` caches, each in a fresh process of the test binary: a process can load
// a library only once, and one test binary checks several versions.
package dltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// childEnv marks a process started by RunChild.
const childEnv = "NCCLGO_DLTEST_CHILD"

// The cached sets the tests load (folders under <cache>/lib, see headers/fetch.sh).
const (
	NCCL2297 = "nccl-2.29.7"
	NCCL2223 = "nccl-2.22.3"
	CUDA535  = "cuda-535.261.03"
)

// CacheDir is where headers/fetch.sh caches headers and libraries: $NCCLGO_CACHE, else
// $XDG_CACHE_HOME/ncclgo, else ~/.cache/ncclgo.
func CacheDir() string {
	if d := os.Getenv("NCCLGO_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ncclgo")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "ncclgo")
	}
	return filepath.Join(home, ".cache", "ncclgo")
}

// StrictEnv, when set (make test and CI set it), turns Missing's skips into failures.
const StrictEnv = "NCCLGO_STRICT"

// Missing skips t, saying what is missing and which command fetches it; when $NCCLGO_STRICT
// is set it fails t with the same message instead, so that CI cannot pass a test that did
// not run.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(StrictEnv) != "" {
		t.Fatalf(format+" (%s is set: a missing prerequisite fails)", append(args, StrictEnv)...)
	}
	t.Skipf(format, args...)
}

// cached returns <cache>/<kind>/<set>/<file>; when it is absent it skips t (fails it
// under NCCLGO_STRICT).
func cached(t testing.TB, kind, set, file string) string {
	t.Helper()
	p := filepath.Join(CacheDir(), kind, set, file)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "%s is not cached (%v): run make %ss", p, err, kind)
	}
	return p
}

// Lib returns the cached library file of set (libnccl.so.2 for nccl-*, libcuda.so.1 for
// cuda-*), skipping t when it is absent (failing it under NCCLGO_STRICT).
func Lib(t testing.TB, set string) string {
	t.Helper()
	file := "libnccl.so.2"
	if strings.HasPrefix(set, "cuda-") {
		file = "libcuda.so.1"
	}
	return cached(t, "lib", set, file)
}

// Header returns the cached header folder of set ("nccl-2.29.7", "cuda-12.4.1") holding
// file, skipping t when it is absent (failing it under NCCLGO_STRICT).
func Header(t testing.TB, set, file string) string {
	t.Helper()
	return filepath.Dir(cached(t, "header", set, file))
}

// InChild reports whether this process was started by RunChild.
func InChild() bool { return os.Getenv(childEnv) != "" }

// RunChild runs the top-level test named test again in a new process of the test binary,
// with env (KEY=value) added to the environment, and fails t with the child's output if
// the child fails. The test, seeing InChild, does the checks that need a fresh process.
// A child that skips makes t skip with the child's output.
func RunChild(t *testing.T, test string, env ...string) {
	t.Helper()
	if InChild() {
		t.Fatalf("RunChild called inside a child for %s", test)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(test)+"$", "-test.count=1", "-test.v")
	cmd.Env = append(append(testenv.Environ(), childEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("child %s %v failed: %v\n%s%s", test, env, err, out, testenv.FailureExcerpt(string(out)))
	case strings.Contains(string(out), "--- SKIP: "+test+" "):
		t.Skipf("child %s skipped:\n%s", test, out)
	case !strings.Contains(string(out), "--- PASS: "+test+" "):
		t.Fatalf("child %s %v ran no test:\n%s%s", test, env, out, testenv.FailureExcerpt(string(out)))
	}
	t.Logf("child %s %v:\n%s", test, env, out)
}

// Compare measures a call against its baseline in the same run: call and base each run
// b.N iterations, in blocks of the same size, taking turns at going first. It reports the
// median over the blocks of each one's ns/op ("<callName>-ns/op", "<baseName>-ns/op") and
// of their ratio ("<callName>/<baseName>"): medians, so that a block the machine
// interrupted does not decide the figure. The benchmark's own allocs/op then count the
// allocations of both loops.
func Compare(b *testing.B, callName, baseName string, call, base func(n int)) {
	const block = 256
	blocks := (b.N + block - 1) / block
	tc := make([]float64, 0, blocks)
	tb := make([]float64, 0, blocks)
	ratio := make([]float64, 0, blocks)
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+block, i+1 {
		m := min(block, b.N-done)
		var dc, db time.Duration
		t0 := time.Now()
		if i%2 == 0 {
			call(m)
			t1 := time.Now()
			base(m)
			dc, db = t1.Sub(t0), time.Since(t1)
		} else {
			base(m)
			t1 := time.Now()
			call(m)
			db, dc = t1.Sub(t0), time.Since(t1)
		}
		tc = append(tc, float64(dc.Nanoseconds())/float64(m))
		tb = append(tb, float64(db.Nanoseconds())/float64(m))
		if db > 0 {
			ratio = append(ratio, float64(dc)/float64(db))
		}
	}
	b.StopTimer()
	b.ReportMetric(median(tc), callName+"-ns/op")
	b.ReportMetric(median(tb), baseName+"-ns/op")
	b.ReportMetric(median(ratio), callName+"/"+baseName)
}

// median returns the median of v (sorting it), 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
