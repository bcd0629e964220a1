package readmetest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFileNamesDoNotRepeatPackage checks the layout rule that a file's name does not
// repeat its package's name as a prefix (comm/nccl/group.go, not nccl_group.go): the
// package is already in the import path. A package's main file may carry its name
// (goid/goid.go, goid_test.go), as in the standard library.
func TestFileNamesDoNotRepeatPackage(t *testing.T) {
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "gpu-bundle" || d.Name() == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".s") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.PackageClauseOnly)
		if err != nil {
			return nil // .s files and files that do not parse have no package clause to read
		}
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".go"), "_test")
		if strings.HasPrefix(base, pkg+"_") {
			bad = append(bad, p)
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, bad, "files whose names repeat their package's name; name them for what they hold")
}

// TestLibraryUsersDoNotGetTheGenerator builds a module outside the repository that
// imports every public library package (comm/... and raw/..., internal and main packages
// left out) through a replace directive, as a user's module would, and checks its build
// list (go list -m all): the generator's dependencies (jennifer, modernc.org/...) stay
// with the generator, a module of its own (tools/bindgen).
func TestLibraryUsersDoNotGetTheGenerator(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	goBin := goTool(t)
	repo, err := filepath.Abs(root)
	require.NoError(t, err)
	var env []string // the machine's environment: its module proxy and cache, GOFLAGS and GOWORK unset
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	var imports []string
	for _, p := range strings.Fields(run(repo, "list", "-f", `{{if ne .Name "main"}}{{.ImportPath}}{{end}}`, "./comm/...", "./raw/...")) {
		if !strings.Contains(p, "/internal/") {
			imports = append(imports, "\t_ \""+p+"\"\n")
		}
	}
	require.Contains(t, imports, "\t_ \"github.com/ncclgo/ncclgo/comm/nccl\"\n")
	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module example.com/user\n\ngo 1.26\n\n"+
		"require github.com/ncclgo/ncclgo v0.0.0\n\nreplace github.com/ncclgo/ncclgo => "+repo+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), []byte("package main\n\nimport (\n"+strings.Join(imports, "")+")\n\nfunc main() {}\n"), 0o644))
	run(mod, "mod", "tidy")
	all := run(mod, "list", "-m", "all")
	for _, dep := range []string{"github.com/dave/jennifer", "modernc.org/"} {
		assert.NotContains(t, all, dep, "a module using the library gets the generator's dependencies")
	}
	assert.Contains(t, all, "github.com/ncclgo/ncclgo v0.0.0 => "+repo)
}
