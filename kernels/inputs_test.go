package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The cached inputs of the kernel checks (headers/manifest.tsv, fetched by
// `make kernel-inputs`, that is headers/fetch.sh kernels).
const (
	ptxasSet   = "ptxas-11.8.89"    // kind tool: ptxas of Debian bookworm's nvidia-cuda-toolkit
	cudaFP16   = "cuda-fp16-12.4.1" // kind include: cuda_bf16.h, cuda_fp16.h and what they include
	libcudacxx = "libcu++-1.8.1"    // kind include: <nv/target> of Debian bookworm's libcu++-dev
)

const fetchHint = "run make kernel-inputs (headers/fetch.sh kernels)"

// missing skips t with the reason, or fails it when NCCLGO_STRICT is set
// (make test and CI set it: there the inputs must be there).
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("NCCLGO_STRICT") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// cachedInput returns the cache folder of a verified input set, as
// headers/fetch.sh names it, or skips (fails under NCCLGO_STRICT) when the
// set is not cached.
func cachedInput(t *testing.T, kind, set string) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join("..", "headers", "fetch.sh"), "path", kind, set).Output()
	if err != nil {
		t.Fatalf("headers/fetch.sh path %s %s: %v", kind, set, err)
	}
	dir := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(dir, ".verified")); err != nil {
		missing(t, "%s set %s is not cached in %s: %s", kind, set, dir, fetchHint)
	}
	return dir
}

// lookTool returns the path of a program on PATH, or skips (fails under
// NCCLGO_STRICT) naming the package that provides it.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "%s not found on PATH: apt-get install %s", name, pkg)
	}
	return p
}
