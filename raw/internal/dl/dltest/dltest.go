// Package dltest helps the tests of raw/nccl and raw/cuda load the real NVIDIA libraries
// that `make libs` caches, each in a fresh process of the test binary: a process can load
// a library only once, and one test binary checks several versions.
package dltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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

// cached returns <cache>/<kind>/<set>/<file>, skipping t when it is absent.
func cached(t testing.TB, kind, set, file string) string {
	t.Helper()
	p := filepath.Join(CacheDir(), kind, set, file)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not cached (%v): run make libs", p, err)
	}
	return p
}

// Lib returns the cached library file of set (libnccl.so.2 for nccl-*, libcuda.so.1 for
// cuda-*), skipping t when it is absent.
func Lib(t testing.TB, set string) string {
	t.Helper()
	file := "libnccl.so.2"
	if strings.HasPrefix(set, "cuda-") {
		file = "libcuda.so.1"
	}
	return cached(t, "lib", set, file)
}

// Header returns the cached header folder of set ("nccl-2.29.7", "cuda-12.4.1") holding
// file, skipping t when it is absent.
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
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("child %s %v failed: %v\n%s", test, env, err, out)
	case strings.Contains(string(out), "--- SKIP: "+test+" "):
		t.Skipf("child %s skipped:\n%s", test, out)
	case !strings.Contains(string(out), "--- PASS: "+test+" "):
		t.Fatalf("child %s %v ran no test:\n%s", test, env, out)
	}
	t.Logf("child %s %v:\n%s", test, env, out)
}

// Alternate runs a and b for n iterations each, in blocks of the same size, swapping which
// goes first every other block, and returns the time each took. Benchmarks use it to
// measure a call and its baseline in the same run under the same conditions.
func Alternate(n int, a, b func(n int)) (ta, tb time.Duration) {
	const block = 1024
	for done, i := 0, 0; done < n; done, i = done+block, i+1 {
		m := min(block, n-done)
		t0 := time.Now()
		if i%2 == 0 {
			a(m)
			t1 := time.Now()
			b(m)
			ta += t1.Sub(t0)
			tb += time.Since(t1)
		} else {
			b(m)
			t1 := time.Now()
			a(m)
			tb += t1.Sub(t0)
			ta += time.Since(t1)
		}
	}
	return ta, tb
}

// ReportRatio reports the per-op times of a call and its baseline, measured over n
// iterations each, and their ratio, as the benchmark's metrics.
func ReportRatio(b *testing.B, call, base time.Duration, callName, baseName string) {
	b.ReportMetric(float64(call.Nanoseconds())/float64(b.N), callName+"-ns/op")
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), baseName+"-ns/op")
	b.ReportMetric(float64(call)/float64(base), callName+"/"+baseName)
}
