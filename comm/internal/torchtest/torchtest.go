// Package torchtest finds the real PyTorch installations the interoperability tests of
// comm and comm/rendezvous run against: torch 1.x from Debian bookworm's python3-torch
// ("torch1"), torch 2.6 in the Debian trixie root that .ci/torch-chroot.sh builds
// ("torch2") and torch 2.14 in its Debian sid root ("torch2.14"). A test that needs one
// calls Require; without it the test is skipped with the command that installs it, or
// fails when NCCLGO_STRICT is set (make test, CI).
package torchtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// Names of the installations.
const (
	Torch1   = "torch1"
	Torch2   = "torch2"
	Torch214 = "torch2.14"
)

// Env is one PyTorch installation.
type Env struct {
	Name    string
	Version string   // torch.__version__
	python  []string // the command that runs its python3
}

// Command runs its python3 with args (paths must lie under /tmp, which the torch2
// and torch2.14 roots share).
func (e Env) Command(ctx context.Context, args ...string) *exec.Cmd {
	argv := append(append([]string{}, e.python...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Major is the major version, 1 or 2.
func (e Env) Major() int {
	if strings.HasPrefix(e.Version, "1.") {
		return 1
	}
	return 2
}

type found struct {
	env Env
	why string // when not found: what is missing and how to get it
}

var (
	once sync.Once
	envs map[string]found
)

// RepoRoot is the module's root directory (where go.mod is).
func RepoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func probe(python []string, wantMajor string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append(append([]string{}, python...), "-c", "import torch, torch.distributed; print(torch.__version__)")
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", &probeError{strings.TrimSpace(errb.String()), err}
	}
	v := strings.TrimSpace(out.String())
	if !strings.HasPrefix(v, wantMajor+".") {
		return v, &probeError{"torch " + v + ", want " + wantMajor + ".x", nil}
	}
	return v, nil
}

type probeError struct {
	msg string
	err error
}

func (e *probeError) Error() string {
	if e.err != nil {
		return e.err.Error() + ": " + lastLine(e.msg)
	}
	return e.msg
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func find() {
	envs = map[string]found{}
	// The probes below run python and .ci/torch-chroot.sh, which read variables and
	// files go test's cache does not see: read the variables here, and stat python3-torch's
	// folder, so that installing torch or pointing at another root runs the tests again.
	testenv.Key()
	_, _ = os.Stat("/usr/lib/python3/dist-packages/torch")
	// torch 1.x: Debian bookworm's python3-torch, in the system python.
	why := "no python3 with torch 1.x (install it: apt-get install python3-torch on Debian bookworm; or set NCCLGO_TORCH1_PYTHON)"
	cands := []string{os.Getenv("NCCLGO_TORCH1_PYTHON"), "/usr/bin/python3"}
	for _, p := range cands {
		if p == "" {
			continue
		}
		if v, err := probe([]string{p}, "1"); err == nil {
			envs[Torch1] = found{env: Env{Name: Torch1, Version: v, python: []string{p}}}
			break
		} else {
			why += "; " + p + ": " + err.Error()
		}
	}
	if _, ok := envs[Torch1]; !ok {
		envs[Torch1] = found{why: why}
	}
	// torch 2.x: the trixie (2.6) and sid (2.14) roots.
	envs[Torch2] = findRoot(Torch2, "trixie")
	envs[Torch214] = findRoot(Torch214, "sid")
}

// findRoot finds the torch 2.x root of .ci/torch-chroot.sh for a Debian suite.
func findRoot(name, suite string) found {
	script := filepath.Join(RepoRoot(), ".ci", "torch-chroot.sh")
	out, err := exec.Command(script, "dir", suite).Output()
	root := strings.TrimSpace(string(out))
	how := "build it (as root, ~10 min, ~1 GB): " + script + " build " + suite
	switch {
	case err != nil:
		return found{why: "no torch 2.x root (" + suite + "): " + script + ": " + err.Error()}
	case os.Geteuid() != 0:
		return found{why: "the torch 2.x root (" + suite + ") needs root to enter (chroot)"}
	}
	if _, err := os.Stat(filepath.Join(root, ".ncclgo-ready")); err != nil {
		return found{why: "no torch 2.x root at " + root + ": " + how}
	}
	py := []string{script, "run", "--root", suite, "python3"}
	v, err := probe(py, "2")
	if err != nil {
		return found{why: "torch 2.x root at " + root + " does not work (" + err.Error() + "): rebuild it: rm -rf " + root + " && " + how}
	}
	return found{env: Env{Name: name, Version: v, python: py}}
}

// Strict reports whether missing tools fail tests instead of skipping them.
func Strict() bool { return os.Getenv("NCCLGO_STRICT") != "" }

// Require returns the installation name (Torch1 or Torch2), or skips the test saying
// how to install it (fails under NCCLGO_STRICT).
func Require(t testing.TB, name string) Env {
	t.Helper()
	once.Do(find)
	f, ok := envs[name]
	if !ok {
		t.Fatalf("torchtest: unknown installation %q", name)
	}
	if f.why != "" {
		if Strict() {
			t.Fatalf("NCCLGO_STRICT is set and %s is missing: %s", name, f.why)
		}
		t.Skipf("%s is missing: %s", name, f.why)
	}
	return f.env
}

// Names lists the installations tests run against.
func Names() []string { return []string{Torch1, Torch2, Torch214} }

// Stage copies files into a new directory under /tmp (visible inside the torch 2.x
// roots), removed when the test ends, and returns it.
func Stage(t testing.TB, files ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ncclgo-torch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
