package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommittedOutputIsFresh regenerates raw/nccl, raw/cuda and the snapshots from the
// real cached headers into a scratch root and compares them byte for byte with the
// repository: generation is deterministic and what is committed is what it produces.
func TestCommittedOutputIsFresh(t *testing.T) {
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	for _, name := range []string{"nccl.json", "cuda.json"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(filepath.Join(repo, "gen", name))
			require.NoError(t, err)
			dir := cfg.headerDir(repo, "", cfg.Target())
			if _, err := os.Stat(filepath.Join(dir, cfg.Header)); err != nil {
				t.Skipf("header set %s is not in the cache %s: run make headers", cfg.Target(), dir)
			}
			cache := cfg.cacheBase()
			root := t.TempDir()
			require.NoError(t, os.CopyFS(filepath.Join(root, "gen", "stub"), os.DirFS(filepath.Join(repo, "gen", "stub"))))
			require.NoError(t, generate(cfg, root, cache, io.Discard))
			got := readTree(t, root)
			delete(got, filepath.Join("gen", "stub"))
			n := 0
			for rel, text := range got {
				if filepath.Dir(rel) == filepath.Join("gen", "stub") {
					continue
				}
				want, err := os.ReadFile(filepath.Join(repo, rel))
				if assert.NoError(t, err, "%s is generated but not in the repository", rel) {
					assert.True(t, string(want) == text, "%s differs from a fresh generation: run make generate", rel)
				}
				n++
			}
			assert.GreaterOrEqual(t, n, 7, "six package files and at least one snapshot")
		})
	}
}
