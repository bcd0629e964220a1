package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommittedOutputIsFresh regenerates raw/nccl, raw/cuda, the snapshots and the API
// history into a scratch root and compares them byte for byte with the repository:
// generation is deterministic and what is committed is what it produces. Sets whose
// header is cached are parsed again (the header -> snapshot step); the others, and raw/
// when the target's header is absent, come from the committed snapshots and model, so
// the check runs on every machine.
func TestCommittedOutputIsFresh(t *testing.T) {
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	for _, name := range []string{"nccl.json", "cuda.json", "mpi.json"} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(filepath.Join(repo, "gen", name))
			require.NoError(t, err)
			root := t.TempDir()
			for _, dir := range []string{filepath.Join("gen", "stub"), cfg.Headers.Snapshots} {
				require.NoError(t, os.CopyFS(filepath.Join(root, dir), os.DirFS(filepath.Join(repo, dir))))
			}
			require.NoError(t, os.MkdirAll(filepath.Join(root, "headers"), 0o755))
			manifest, err := os.ReadFile(filepath.Join(repo, "headers", "manifest.tsv"))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(root, "headers", "manifest.tsv"), manifest, 0o644))
			var out bytes.Buffer
			require.NoError(t, generate(cfg, root, cfg.cacheBase(), &out))
			t.Log(strings.TrimSpace(out.String()))
			if len(cfg.Sets) > 1 {
				hist, err := history(cfg, root)
				require.NoError(t, err)
				want, err := os.ReadFile(filepath.Join(repo, "docs", cfg.Package+"-api-history.md"))
				require.NoError(t, err)
				assert.True(t, bytes.Equal(want, hist), "docs/%s-api-history.md differs from a fresh generation: run make generate", cfg.Package)
			}
			got := readTree(t, root)
			n := 0
			for rel, text := range got {
				if filepath.Dir(rel) == filepath.Join("gen", "stub") || rel == filepath.Join("headers", "manifest.tsv") {
					continue
				}
				if strings.HasPrefix(rel, cfg.Headers.Snapshots) && !strings.HasPrefix(filepath.Base(rel), strings.SplitN(cfg.Target(), "-", 2)[0]+"-") {
					continue // another config's snapshots, copied along
				}
				want, err := os.ReadFile(filepath.Join(repo, rel))
				if assert.NoError(t, err, "%s is generated but not in the repository", rel) {
					assert.True(t, string(want) == text, "%s differs from a fresh generation: run make generate", rel)
				}
				n++
			}
			assert.GreaterOrEqual(t, n, 9, "eight package files, a snapshot and a model")
		})
	}
}
