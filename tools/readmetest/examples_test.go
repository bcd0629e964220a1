package readmetest

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testFiles parses every _test.go file of the repository, skipping testdata and hidden
// folders, and returns them by path.
func testFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "gpu-bundle") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
			if err != nil {
				return err
			}
			files[p] = f
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// TestEveryExampleRuns: go test compiles an Example without an "// Output:" comment but
// never runs it, so such an example would pass without running. An example that needs
// what a machine may lack (Open MPI) has no Output comment, so that go test does not
// fail it there: a test of its package calls it instead (and skips without the library).
func TestEveryExampleRuns(t *testing.T) {
	files := testFiles(t)
	// called reports whether a function of a test file in dir calls name.
	called := func(dir, name string) bool {
		for p, f := range files {
			if filepath.Dir(p) != dir {
				continue
			}
			found := false
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == name {
						found = true
					}
				}
				return !found
			})
			if found {
				return true
			}
		}
		return false
	}
	n := 0
	for p, f := range files {
		for _, ex := range doc.Examples(f) {
			n++
			assert.True(t, ex.Output != "" || ex.EmptyOutput || called(filepath.Dir(p), "Example"+ex.Name),
				"%s: Example%s has no // Output: comment and no test calls it, so go test never runs it", p, ex.Name)
		}
	}
	assert.Positive(t, n, "no examples found")
}

// TestGPUTestsCopyThroughCudatest: a GPU test that copies host memory with cuMemcpyHtoD
// or fills it with cuMemsetD8 and then reads it on a non-blocking stream races the copy;
// raw/cuda/cudatest waits for it. Only raw/cuda's own tests call those functions directly.
func TestGPUTestsCopyThroughCudatest(t *testing.T) {
	for p, f := range testFiles(t) {
		gpu := false
		for _, c := range f.Comments {
			for _, l := range c.List {
				if strings.HasPrefix(l.Text, "//go:build") && strings.Contains(l.Text, "gpu") {
					gpu = true
				}
			}
		}
		if !gpu || filepath.ToSlash(p) == root+"/raw/cuda/gpu_test.go" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "cuda" && (sel.Sel.Name == "MemcpyHtoD" || sel.Sel.Name == "MemsetD8") {
					t.Errorf("%s: cuda.%s: use cudatest.Upload or cudatest.Fill, which wait for the data", p, sel.Sel.Name)
				}
			}
			return true
		})
	}
}
