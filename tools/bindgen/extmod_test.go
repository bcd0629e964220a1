package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// extModule is a temporary module outside the repository that uses ncclgo through a
// replace directive (the module proxy does not serve this checkout), as a user's own
// module would.
type extModule struct {
	t     *testing.T
	dir   string
	repo  string
	goBin string
	env   []string // the environment of every go command: the machine's, GOFLAGS unset
}

// newExtModule makes the module folder; go.mod is left to the caller. It skips t when
// gcc is missing (fails under NCCLGO_STRICT) and in -short mode.
func newExtModule(t *testing.T) *extModule {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a module")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatal("gcc is not on PATH (apt-get install gcc)")
		}
		t.Skip("gcc is not on PATH (apt-get install gcc)")
	}
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	// go test puts the go command that runs it first on PATH.
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") {
			env = append(env, kv)
		}
	}
	return &extModule{t: t, dir: t.TempDir(), repo: repo, goBin: goBin, env: env}
}

// write writes a file of the module.
func (m *extModule) write(rel, text string) {
	m.t.Helper()
	p := filepath.Join(m.dir, rel)
	require.NoError(m.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(m.t, os.WriteFile(p, []byte(text), 0o644))
}

// library compiles C source into the shared library lib/<soname> and returns its path.
func (m *extModule) library(soname, source, include string) string {
	m.t.Helper()
	src := filepath.Join(m.dir, "csrc", soname+".c")
	m.write(filepath.Join("csrc", soname+".c"), source)
	lib := filepath.Join(m.dir, "lib", soname)
	require.NoError(m.t, os.MkdirAll(filepath.Dir(lib), 0o755))
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-I", filepath.Join(m.dir, include),
		"-Wl,-soname,"+soname, "-o", lib, src).CombinedOutput()
	require.NoError(m.t, err, "gcc: %s", out)
	return lib
}

// run runs a command in the module folder with env added, returning its output and error.
func (m *extModule) run(env []string, name string, args ...string) (string, error) {
	m.t.Helper()
	if name == "go" {
		name = m.goBin
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = m.dir
	cmd.Env = append(append([]string{}, m.env...), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// goCmd runs go with args and env added, failing the test if it fails.
func (m *extModule) goCmd(env []string, args ...string) string {
	m.t.Helper()
	out, err := m.run(env, "go", args...)
	require.NoError(m.t, err, "go %s:\n%s", strings.Join(args, " "), out)
	return out
}

// extGoMod is the go.mod of a module named name that requires ncclgo (for raw/dl) and
// its generator, a module of its own, both replaced by the checkout at repo.
func extGoMod(name, repo string) string {
	return "module " + name + "\n\ngo 1.26\n\n" +
		"require (\n\tgithub.com/ncclgo/ncclgo v0.0.0\n\tgithub.com/ncclgo/ncclgo/tools/bindgen v0.0.0\n)\n\n" +
		"replace github.com/ncclgo/ncclgo => " + repo + "\n\n" +
		"replace github.com/ncclgo/ncclgo/tools/bindgen => " + filepath.Join(repo, "tools", "bindgen") + "\n"
}
