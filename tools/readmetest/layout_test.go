package readmetest

import (
	"go/parser"
	"go/token"
	"io/fs"
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
