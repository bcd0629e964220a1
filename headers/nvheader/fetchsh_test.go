package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetchSh runs headers/fetch.sh with a manifest and cache of the test's own.
func fetchSh(t *testing.T, manifest, cache string, env ...string) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manifest.tsv")
	require.NoError(t, os.WriteFile(path, []byte(manifest), 0o644))
	// fetch.sh runs nvheader with the go command on PATH, which go test puts first there.
	cmd := exec.Command("bash", "../fetch.sh", "headers")
	cmd.Env = append(os.Environ(), append([]string{"NCCLGO_CACHE=" + cache, "NCCLGO_MANIFEST=" + path}, env...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fetch.sh makes a github-pinned header with nvheader and checks it against the pin; where
// github cannot be reached it skips the set (bindgen then reads the committed snapshot).
func TestFetchShMakesGithubHeadersAndSkipsWhenUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nvheader")
	}
	srv := githubServer(t, fixture)
	line := "header\tnccl-9.8.7\tNVIDIA/nccl\tgithub\t-\tv9.8.7-1\tsrc/nccl.h.in\t" + sum([]byte(wantHeader)) + "\t" + srv.URL + "/NVIDIA/nccl/v9.8.7-1/src/nccl.h.in\n"

	cache := t.TempDir()
	out, err := fetchSh(t, line, cache, "NCCLGO_GITHUB_RAW="+srv.URL)
	require.NoError(t, err, out)
	got, err := os.ReadFile(filepath.Join(cache, "header", "nccl-9.8.7", "nccl.h"))
	require.NoError(t, err, out)
	assert.Equal(t, wantHeader, string(got))
	assert.FileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", ".verified"))

	// A pin that does not match what the source gives now is an error.
	bad := strings.Replace(line, sum([]byte(wantHeader)), strings.Repeat("0", 64), 1)
	cache = t.TempDir()
	out, err = fetchSh(t, bad, cache, "NCCLGO_GITHUB_RAW="+srv.URL)
	require.Error(t, err, out)
	assert.Contains(t, out, "the manifest pins "+strings.Repeat("0", 64))
	assert.Contains(t, out, "fetch.sh: nccl-9.8.7: github gave no nccl.h matching headers/manifest.tsv")
	assert.NoFileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", ".verified"))

	// Unreachable: one message for the source, no failure.
	cache = t.TempDir()
	two := line + strings.ReplaceAll(line, "9.8.7", "9.8.8")
	out, err = fetchSh(t, two, cache, "NCCLGO_GITHUB_RAW=http://127.0.0.1:1")
	require.NoError(t, err, out)
	assert.Equal(t, 1, strings.Count(out, "and the other github sets not fetched (github cannot be reached from here): tools/bindgen reads them from gen/snapshot"), out)
	assert.NoFileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", "nccl.h"))
}
