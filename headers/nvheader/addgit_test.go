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

// gitClone makes a small clone of NVIDIA/nccl: the fixture tree, committed and tagged v9.8.7-1.
func gitClone(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for p, text := range fixture {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(text), 0o644))
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"commit", "-q", "-m", "NCCL 9.8.7-1"}, {"tag", "v9.8.7-1"}} {
		gitRun(t, dir, args...)
	}
	return dir
}

// gitRun runs git in dir, with no configuration of the machine's or the user's.
func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=ncclgo tests", "-c", "user.email=tests@ncclgo.invalid",
		"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

// makeHeaders runs `make headers VARS...` at the repository root with a manifest and cache of
// the test's own. Any request to GitHub or PyPI goes to a proxy that is not there: the
// route must need no network.
func makeHeaders(t *testing.T, manifest, cache string, vars ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "-C", filepath.Join("..", ".."), "--no-print-directory", "headers"}, vars...)...)
	cmd.Env = fetchEnv(cache, manifest, "HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fetchLines are the lines of out that fetch.sh printed (not make's).
func fetchLines(out string) []string {
	var l []string
	for _, s := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if s != "" && !strings.HasPrefix(s, "make: ") {
			l = append(l, s)
		}
	}
	return l
}

// The maintainer's offline route: make headers NCCL=x.y.z NCCL_SOURCE=git NCCL_GIT=DIR pins
// the release in the manifest (a copy here, never the real one) and caches its nccl.h, from
// a local clone of NVIDIA/nccl (its folder, or a bare clone) and nothing else.
func TestMakeHeadersAddsAReleaseFromALocalClone(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make and builds nvheader")
	}
	missing(t, "git", "make")
	real, err := os.ReadFile(filepath.Join("..", "manifest.tsv"))
	require.NoError(t, err)
	clone := gitClone(t)
	bare := filepath.Join(t.TempDir(), "nccl.git")
	gitRun(t, clone, "clone", "-q", "--bare", clone, bare)
	line := "header\tnccl-9.8.7\tNVIDIA/nccl\tgithub\t-\tv9.8.7-1\tsrc/nccl.h.in\t" + sum([]byte(wantHeader)) +
		"\thttps://raw.githubusercontent.com/NVIDIA/nccl/v9.8.7-1/src/nccl.h.in\n"

	for _, dir := range []string{clone, bare} {
		manifest := filepath.Join(t.TempDir(), "manifest.tsv")
		require.NoError(t, os.WriteFile(manifest, real, 0o644))
		cache := t.TempDir()
		out, err := makeHeaders(t, manifest, cache, "NCCL=9.8.7", "NCCL_SOURCE=git", "NCCL_GIT="+dir)
		require.NoError(t, err, out)
		assert.Equal(t, []string{"fetch.sh: pinned nccl-9.8.7 (from the local clone " + dir + ") in " + manifest +
			" and cached its nccl.h; now append \"nccl-9.8.7\" to sets in gen/nccl.json and run make generate"}, fetchLines(out))
		got, err := os.ReadFile(manifest)
		require.NoError(t, err)
		assert.Equal(t, string(real)+line, string(got))
		h, err := os.ReadFile(filepath.Join(cache, "header", "nccl-9.8.7", "nccl.h"))
		require.NoError(t, err, out)
		assert.Equal(t, wantHeader, string(h))
		assert.FileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", ".verified"))

		// A release that is pinned already is not added twice.
		out, err = makeHeaders(t, manifest, cache, "NCCL=9.8.7", "NCCL_SOURCE=git", "NCCL_GIT="+dir)
		assert.Equal(t, 2, exitCode(err), out) // make's status for a failed recipe
		assert.Equal(t, []string{"fetch.sh: nccl-9.8.7 is already pinned in " + manifest + "; nothing to add (make headers fetches it)"}, fetchLines(out))
	}
	after, err := os.ReadFile(filepath.Join("..", "manifest.tsv"))
	require.NoError(t, err)
	assert.Equal(t, string(real), string(after), "the real manifest is never touched")

	for _, c := range []struct {
		name string
		vars []string
		want string
	}{
		{"no clone given", []string{"NCCL=9.8.7", "NCCL_SOURCE=git"},
			"fetch.sh: nccl-9.8.7: NVIDIA/nccl v9.8.7-1 (git): NCCL_SOURCE=git needs NCCL_GIT=<the folder of a local clone of NVIDIA/nccl>"},
		{"clone is not a folder", []string{"NCCL=9.8.7", "NCCL_SOURCE=git", "NCCL_GIT=" + filepath.Join(clone, "nope")},
			"fetch.sh: nccl-9.8.7: NVIDIA/nccl v9.8.7-1 (git): NCCL_GIT=" + filepath.Join(clone, "nope") + " is not a folder; give the folder of a local clone of NVIDIA/nccl"},
		{"tag not in the clone", []string{"NCCL=9.8.8", "NCCL_SOURCE=git", "NCCL_GIT=" + clone},
			"fetch.sh: nccl-9.8.8: NVIDIA/nccl v9.8.8-1 could not be had (git: git show v9.8.8-1:src/nccl.h.in in " + clone +
				": fatal: invalid object name 'v9.8.8-1'.); check the release, and that " + clone + " has its tag (git -C " + clone + " fetch --tags)"},
		{"unknown source", []string{"NCCL=9.8.7", "NCCL_SOURCE=svn"},
			"fetch.sh: nccl-9.8.7: NCCL_SOURCE=svn is not debian, github, pypi or git; pick one of them, or leave it unset to try Debian, github and pypi"},
		{"not a release", []string{"NCCL=9.8"},
			"fetch.sh: add: NCCL=9.8 is not a release X.Y.Z; e.g. make headers NCCL=2.30.7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			manifest := filepath.Join(t.TempDir(), "manifest.tsv")
			require.NoError(t, os.WriteFile(manifest, real, 0o644))
			cache := t.TempDir()
			out, err := makeHeaders(t, manifest, cache, c.vars...)
			assert.Equal(t, 2, exitCode(err), out)
			assert.Equal(t, []string{c.want}, fetchLines(out))
			got, err := os.ReadFile(manifest)
			require.NoError(t, err)
			assert.Equal(t, string(real), string(got), "a failed add leaves the manifest alone")
			assert.NoDirExists(t, filepath.Join(cache, "header"))
		})
	}
}

// fetch.sh add takes a release Debian serves from Debian (a local archive here): the
// manifest line pins the .deb's version and suite, and nccl.h is cached.
func TestFetchShAddsAReleaseFromDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("runs apt-get")
	}
	missing(t, "apt-get", "dpkg-deb")
	h := []byte(wantHeader)
	dev := debPkg{name: "libnccl-dev", version: "9.8.7-1-1", suite: "sid", comp: "contrib", files: map[string][]byte{"usr/include/nccl.h": h}}
	older := debPkg{name: "libnccl-dev", version: "9.8.6-1-1", suite: "trixie", comp: "contrib", files: map[string][]byte{"usr/include/nccl.h": h}}
	other := debPkg{name: "libother", version: "1.0-1", suite: "bookworm", comp: "contrib", files: map[string][]byte{"usr/share/doc/libother/x": h}}
	mirror := newDebRepo(t, dev, older, other)
	env := []string{"NCCLGO_DEBIAN_MIRROR=" + mirror, "NCCLGO_APT_TRUSTED=1", "NCCL_SOURCE=debian"}

	cache := t.TempDir()
	out, manifest, err := runFetchSh(t, "add", "", cache, append(env, "NCCL=9.8.7")...)
	require.NoError(t, err, out)
	got, err := os.ReadFile(manifest)
	require.NoError(t, err)
	assert.Equal(t, "header\tnccl-9.8.7\tlibnccl-dev\tsid\tcontrib\t9.8.7-1-1\tusr/include/nccl.h\t"+sum(h)+"\n", string(got))
	cached, err := os.ReadFile(filepath.Join(cache, "header", "nccl-9.8.7", "nccl.h"))
	require.NoError(t, err, out)
	assert.Equal(t, wantHeader, string(cached))

	out, manifest, err = runFetchSh(t, "add", "", t.TempDir(), append(env, "NCCL=9.8.5")...)
	assert.Equal(t, 1, exitCode(err), out)
	assert.Equal(t, []string{"fetch.sh: nccl-9.8.5: libnccl-dev 9.8.5: Debian does not serve it (it serves 9.8.6-1-1 (trixie/contrib), 9.8.7-1-1 (sid/contrib)); " +
		"try NCCL_SOURCE=github, pypi, or git with NCCL_GIT=<a local clone of NVIDIA/nccl>"}, messages(out))
	got, err = os.ReadFile(manifest)
	require.NoError(t, err)
	assert.Empty(t, string(got))
}
