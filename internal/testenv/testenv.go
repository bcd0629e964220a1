// Package testenv makes go test's cache see what the repository's test subprocesses
// read. go test replays a package's result from its cache unless a variable the test
// process read with os.Getenv, or a file it opened or stat'ed, has changed; a variable
// that only a child reads (a rank under mpirun, a test binary run again, a python under
// torchrun, a script) is invisible to it. A test that starts such a child therefore
// takes the child's environment from Environ, which first reads every variable the
// children may read, so that changing $NCCLGO_CACHE, $NCCLGO_STRICT, a torch root or
// $PATH runs the test again instead of replaying it.
package testenv

import (
	"os"
	"strings"
)

// Variables are the variables the repository's code, tests and tools read, read by Key
// whether set or not (a variable set later must invalidate a result cached without it).
var Variables = []string{
	// The caches and roots: headers/fetch.sh, libcache, dltest, torchtest, .ci/*.sh.
	"NCCLGO_CACHE", "XDG_CACHE_HOME", "HOME",
	"NCCLGO_TORCH1_PYTHON", "NCCLGO_TORCH2_ROOT", "NCCLGO_TORCH_SID_ROOT",
	// Strict mode: a missing library, header or tool fails instead of skipping.
	"NCCLGO_STRICT",
	// The libraries raw/... load.
	"NCCLGO_LIBNCCL", "NCCLGO_LIBCUDA", "NCCLGO_LIBMPI", "LD_LIBRARY_PATH",
	// Where mpirun, torchrun, python3, gcc and the scripts are found.
	"PATH",
	// The Go runtime of the children.
	"GOMAXPROCS", "GOMEMLIMIT", "GOGC", "GODEBUG", "GORACE", "GOTRACEBACK",
	// The devices a child sees.
	"CUDA_VISIBLE_DEVICES",
}

// Prefixes are the prefixes of further variables Key reads when they are set: the
// library's own and NCCL's settings, CUDA's, Open MPI's and PMIx's, and the launchers'.
var Prefixes = []string{"NCCLGO_", "NCCL_", "CUDA_", "OMPI_", "OPAL_", "PMIX_", "TORCH", "MASTER_", "LWS_", "PET_", "SLURM_"}

// Key reads, with os.Getenv, each of Variables and each set variable that starts with
// one of Prefixes, so that go test keys the calling package's cached result on them.
func Key() {
	for _, name := range Variables {
		_ = os.Getenv(name)
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, p := range Prefixes {
			if strings.HasPrefix(name, p) {
				_ = os.Getenv(name)
				break
			}
		}
	}
}

// Environ is os.Environ for a child process of a test, after Key.
func Environ() []string {
	Key()
	return os.Environ()
}

// failureMarkers start what a child printed when it failed: a panic or runtime error, a
// data race, a failed test, a Python exception (pyTraceback).
var failureMarkers = []string{"panic: ", "fatal error: ", "WARNING: DATA RACE", "SIGSEGV", "--- FAIL: ", pyTraceback}

// pyTraceback starts a Python exception's report, which names the exception on its
// last line: the first line after the marker that is not indented.
const pyTraceback = "Traceback (most recent call last):"

// excerptLines is how many lines FailureExcerpt repeats at most.
const excerptLines = 24

// FailureExcerpt repeats, for the end of a failing test's message after a child's whole
// output, the lines from the output's first failure marker on (at most 24): a CI log
// that keeps only the end of a long output still shows why the child (a rank, a test
// binary run again, a launcher's workers, a Python script) failed. A Python traceback
// is repeated up to its exception line, its first and last frames when it is longer.
// It is empty when no marker is there.
func FailureExcerpt(out string) string {
	first, marker := -1, ""
	for _, m := range failureMarkers {
		if i := strings.Index(out, m); i >= 0 && (first < 0 || i < first) {
			first, marker = i, m
		}
	}
	if first < 0 {
		return ""
	}
	start := strings.LastIndexByte(out[:first], '\n') + 1
	lines := strings.Split(out[start:], "\n")
	if marker == pyTraceback {
		end := 1
		for end < len(lines) && (lines[end] == "" || lines[end][0] == ' ' || lines[end][0] == '\t') {
			end++
		}
		lines = lines[:min(end+1, len(lines))]
		if len(lines) > excerptLines {
			lines = append(lines[:1:1], append([]string{"  ..."}, lines[len(lines)-(excerptLines-2):]...)...)
		}
	}
	return "\nfirst failure in the output above:\n" + strings.Join(lines[:min(len(lines), excerptLines)], "\n")
}
