package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetchEnv is the environment of a fetch.sh run of a test: the test's cache and manifest,
// no NCCLGO_* setting of the caller's, no proxy (the fixture servers are on loopback).
func fetchEnv(cache, manifest string, env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "NCCLGO_") || name == "MAKEFLAGS" || name == "MFLAGS" || name == "MAKELEVEL" || strings.EqualFold(name, "http_proxy") || strings.EqualFold(name, "https_proxy") {
			continue
		}
		out = append(out, kv)
	}
	// fetch.sh runs nvheader with the go command on PATH, which go test puts first there.
	out = append(out, "NCCLGO_CACHE="+cache, "NCCLGO_MANIFEST="+manifest)
	return append(out, env...)
}

// runFetchSh runs headers/fetch.sh COMMAND with a manifest (written to a file of the test,
// whose path it returns) and cache of the test's own.
func runFetchSh(t *testing.T, command, manifest, cache string, env ...string) (out, manifestPath string, err error) {
	t.Helper()
	manifestPath = filepath.Join(t.TempDir(), "manifest.tsv")
	require.NoError(t, os.WriteFile(manifestPath, []byte(manifest), 0o644))
	cmd := exec.Command("bash", "../fetch.sh", command)
	cmd.Env = fetchEnv(cache, manifestPath, env...)
	b, err := cmd.CombinedOutput()
	return string(b), manifestPath, err
}

// fetchSh runs headers/fetch.sh headers.
func fetchSh(t *testing.T, manifest, cache string, env ...string) (string, error) {
	t.Helper()
	out, _, err := runFetchSh(t, "headers", manifest, cache, env...)
	return out, err
}

// progress matches the lines fetch.sh prints for each set it fetches.
var progress = regexp.MustCompile(`^fetch\.sh: \S+: .* -> /|^fetch\.sh: [^:]+: \d+ files from `)

// messages are the lines of out that are not progress lines.
func messages(out string) []string {
	var m []string
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if l != "" && !progress.MatchString(l) {
			m = append(m, l)
		}
	}
	return m
}

// exitCode is the exit status of a finished command (-1 for another error).
func exitCode(err error) int {
	var e *exec.ExitError
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
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

	// A pin that does not match what the source gives now is an error: one line.
	bad := strings.Replace(line, sum([]byte(wantHeader)), strings.Repeat("0", 64), 1)
	cache = t.TempDir()
	out, manifest, err := runFetchSh(t, "headers", bad, cache, "NCCLGO_GITHUB_RAW="+srv.URL)
	assert.Equal(t, 1, exitCode(err), out)
	assert.Equal(t, []string{"fetch.sh: nccl-9.8.7: NVIDIA/nccl v9.8.7-1 (github): nccl.h of 9.8.7 from " + srv.URL +
		"/NVIDIA/nccl/v9.8.7-1/src/nccl.h.in has sha256 " + sum([]byte(wantHeader)) + ", the manifest pins " + strings.Repeat("0", 64) +
		"; if the release was re-tagged on purpose, pin the new sha256 in " + manifest}, messages(out))
	assert.NoFileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", ".verified"))

	// Sources that do not make the header: one line too.
	files := map[string]string{}
	for k, v := range fixture {
		files[k] = v
	}
	files["makefiles/version.mk"] = strings.Replace(fixture["makefiles/version.mk"], "7", "6", 1)
	other := githubServer(t, files)
	out, manifest, err = runFetchSh(t, "headers", line, t.TempDir(), "NCCLGO_GITHUB_RAW="+other.URL)
	assert.Equal(t, 1, exitCode(err), out)
	assert.Equal(t, []string{"fetch.sh: nccl-9.8.7: NVIDIA/nccl v9.8.7-1 (github): makefiles/version.mk says 9.8.6, not 9.8.7; check its line in " +
		manifest + " (headers/nvheader makes nccl.h from the github release)"}, messages(out))

	// Unreachable: one message for the source, no failure.
	cache = t.TempDir()
	two := line + strings.ReplaceAll(line, "9.8.7", "9.8.8")
	out, err = fetchSh(t, two, cache, "NCCLGO_GITHUB_RAW=http://127.0.0.1:1")
	require.NoError(t, err, out)
	assert.Equal(t, 1, strings.Count(out, "and the other github sets not fetched (github cannot be reached from here): tools/bindgen reads them from gen/snapshot"), out)
	assert.NoFileExists(t, filepath.Join(cache, "header", "nccl-9.8.7", "nccl.h"))
}

// The fixture archive of the fetch.sh tests: a header set of two files and an include set
// from one package, a header in main, a tool in non-free and a library in sid.
var (
	demoDev = debPkg{name: "libdemo-dev", version: "1.0-1", suite: "trixie", comp: "contrib", files: map[string][]byte{
		"usr/include/demo.h": []byte("#include <demo/more.h>\nint demo(void);\n"), "usr/include/demo/more.h": []byte("#define DEMO_MORE 1\n"),
		"usr/include/demo_fp.h": []byte("typedef unsigned short demo_half;\n")}}
	demoMPI = debPkg{name: "libdemompi-dev", version: "4.1.4-3+b1", suite: "bookworm", comp: "main", files: map[string][]byte{
		"usr/lib/x86_64-linux-gnu/demompi/include/mpi.h": []byte("int MPI_Init(int *, char ***);\n")}}
	demoTool = debPkg{name: "demo-toolkit", version: "11.8.89~11.8.0-5~deb12u1", suite: "bookworm", comp: "non-free", files: map[string][]byte{
		"usr/bin/demoas": []byte("#!/bin/sh\necho demoas\n")}}
)

// demoManifest pins demoDev's two headers as the set demo-1.0.
func demoManifest() string {
	return demoDev.manifestLine("header", "demo-1.0", "usr/include/demo.h") + demoDev.manifestLine("header", "demo-1.0", "usr/include/demo/more.h")
}

// fetch.sh against a local Debian archive, into an empty cache: every kind of line, github
// and pypi lines next to Debian ones (only Debian suites may become apt sources: a github
// line once made apt-get update fail), every file where the tests look for it, with the
// pinned checksum.
func TestFetchShFetchesFromADebianArchive(t *testing.T) {
	if testing.Short() {
		t.Skip("runs apt-get, builds nvheader and patchlib")
	}
	missing(t, "apt-get", "dpkg-deb", "gcc")
	so := filepath.Join(t.TempDir(), "libdemo.so.1.0")
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,libdemo.so.1", "-o", so, "-x", "c", "-", "-xnone").CombinedOutput()
	require.NoError(t, err, string(out))
	lib, err := os.ReadFile(so)
	require.NoError(t, err)
	demoLib := debPkg{name: "libdemo1", version: "1.0-1", suite: "sid", comp: "contrib", files: map[string][]byte{"usr/lib/x86_64-linux-gnu/libdemo.so.1.0": lib}}
	mirror := newDebRepo(t, demoDev, demoMPI, demoTool, demoLib)

	manifest := "# a comment\n" + demoManifest() +
		"header\tnccl-9.8.7\tNVIDIA/nccl\tgithub\t-\tv9.8.7-1\tsrc/nccl.h.in\t" + sum([]byte(wantHeader)) + "\thttp://127.0.0.1:1/NVIDIA/nccl/v9.8.7-1/src/nccl.h.in\n" +
		"header\tnccl-9.8.6\tnvidia-nccl-cu12\tpypi\t-\t9.8.6\tnvidia/nccl/include/nccl.h\t" + sum([]byte(wantHeader)) + "\thttp://127.0.0.1:1/x.whl\n" +
		demoMPI.manifestLine("header", "demompi-4.1.4", "usr/lib/x86_64-linux-gnu/demompi/include/mpi.h") +
		demoDev.manifestLine("include", "demo-fp-1.0", "usr/include/demo_fp.h") +
		demoTool.manifestLine("tool", "demoas-11.8.89", "usr/bin/demoas") +
		demoLib.manifestLine("lib", "demo-1.0", "usr/lib/x86_64-linux-gnu/libdemo.so.1.0")
	cache := t.TempDir()
	env := []string{"NCCLGO_DEBIAN_MIRROR=" + mirror, "NCCLGO_APT_TRUSTED=1", "NCCLGO_GITHUB_RAW=http://127.0.0.1:1", "NCCLGO_PYPI=http://127.0.0.1:1"}
	out2, _, err := runFetchSh(t, "all", manifest, cache, env...)
	require.NoError(t, err, out2)

	for _, c := range []struct {
		dest string
		pkg  debPkg
		file string
	}{
		{"header/demo-1.0/demo.h", demoDev, "usr/include/demo.h"},
		{"header/demo-1.0/demo/more.h", demoDev, "usr/include/demo/more.h"},
		{"header/demompi-4.1.4/mpi.h", demoMPI, "usr/lib/x86_64-linux-gnu/demompi/include/mpi.h"},
		{"include/demo-fp-1.0/demo_fp.h", demoDev, "usr/include/demo_fp.h"},
		{"tool/demoas-11.8.89/demoas", demoTool, "usr/bin/demoas"},
		{"lib/demo-1.0/libdemo.so.1.0", demoLib, "usr/lib/x86_64-linux-gnu/libdemo.so.1.0"},
	} {
		got, err := os.ReadFile(filepath.Join(cache, c.dest))
		if assert.NoError(t, err, out2) {
			assert.Equal(t, sum(c.pkg.files[c.file]), sum(got), c.dest)
		}
		set := strings.SplitN(c.dest, "/", 3) // kind, set, the file's path in the set
		assert.FileExists(t, filepath.Join(cache, set[0], set[1], ".verified"))
	}
	link, err := os.Readlink(filepath.Join(cache, "lib/demo-1.0/libdemo.so.1"))
	require.NoError(t, err, out2)
	assert.Equal(t, "libdemo.so.1.0", link)
	assert.Equal(t, 2, strings.Count(out2, "sets not fetched"), out2) // one line each for github and pypi
	assert.NoFileExists(t, filepath.Join(cache, "header/nccl-9.8.7/nccl.h"))

	sources, err := os.ReadFile(filepath.Join(cache, "apt", "sources.list"))
	require.NoError(t, err)
	assert.Equal(t, "deb [trusted=yes] "+mirror+" bookworm main\ndeb [trusted=yes] "+mirror+" bookworm non-free\n"+
		"deb [trusted=yes] "+mirror+" sid contrib\ndeb [trusted=yes] "+mirror+" trixie contrib\n", string(sources))
	debs, err := filepath.Glob(filepath.Join(cache, "apt", "*", "*.deb"))
	require.NoError(t, err)
	assert.Empty(t, debs, "the .debs are deleted once their files are extracted")

	// A second run finds everything cached: nothing is fetched again.
	out3, _, err := runFetchSh(t, "all", manifest, cache, env...)
	require.NoError(t, err, out3)
	assert.NotRegexp(t, `(?m)^fetch\.sh: .*\) -> /|files from`, out3) // github and pypi are tried again
}

// Every failure stops fetch.sh with exit status 1 and one line that names the set, the
// package and what to do: no dpkg-deb, tar or sha256sum noise before it, no step that
// fails inside a command substitution and lets the script go on.
func TestFetchShFailsWithOneClearLine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs apt-get")
	}
	missing(t, "apt-get", "dpkg-deb")
	mirror := newDebRepo(t, demoDev)
	manifest := demoManifest()
	zeros := strings.Repeat("0", 64)
	for _, c := range []struct {
		name, manifest string
		prepare        func(cache string)
		mirror         string
		want           string // a regular expression once QuoteMeta'd pieces are joined; {M} is the manifest, {C} the cache
	}{
		{name: "version not served", manifest: strings.ReplaceAll(manifest, "1.0-1", "1.0-2"),
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-2 (trixie/contrib) is not served by " + mirror +
				" (it serves 1.0-1 (trixie/contrib)); pin a served version and its sha256 in {M}"},
		{name: "package not served", manifest: strings.ReplaceAll(manifest, "libdemo-dev", "libgone-dev"),
			want: "fetch.sh: demo-1.0: libgone-dev 1.0-1 (trixie/contrib) is not served by " + mirror +
				" (it serves no version of libgone-dev); pin a served version and its sha256 in {M}"},
		{name: "checksum", manifest: strings.Replace(manifest, sum(demoDev.files["usr/include/demo.h"]), zeros, 1),
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-1 (trixie/contrib): usr/include/demo.h has sha256 " + sum(demoDev.files["usr/include/demo.h"]) +
				", {M} pins " + zeros + "; if the package changed on purpose, pin the new sha256 there"},
		{name: "file not in the package", manifest: strings.ReplaceAll(manifest, "usr/include/demo.h", "usr/include/gone.h"),
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-1 (trixie/contrib) has no usr/include/gone.h; fix the file column of its line in {M}"},
		{name: "unreadable cached deb", manifest: manifest,
			prepare: func(cache string) {
				require.NoError(t, os.MkdirAll(filepath.Join(cache, "apt", "debs"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(cache, "apt", "debs", demoDev.debFile()), []byte("half a download"), 0o644))
			},
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-1 (trixie/contrib): {C}/apt/debs/" + demoDev.debFile() +
				" is not a readable .deb (dpkg-deb: (.+)); it is deleted now: run again"},
		{name: "not a Debian suite", manifest: strings.ReplaceAll(manifest, "trixie", "gitlab"),
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-1: suite gitlab ({M} line 1) is neither a Debian suite nor github or pypi; fix that line"},
		{name: "short line", manifest: "header\tdemo-1.0\tlibdemo-dev\ttrixie\n",
			want: "fetch.sh: demo-1.0: libdemo-dev: {M} line 1 has 4 columns, not 8 or more; fix that line"},
		{name: "mirror unreachable", manifest: manifest, mirror: "http://127.0.0.1:1",
			want: "fetch.sh: demo-1.0: libdemo-dev 1.0-1 (trixie/contrib): apt-get update against http://127.0.0.1:1 failed ((.+)); " +
				"check the network and NCCLGO_DEBIAN_MIRROR (the full log is {C}/apt/update.log)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache := t.TempDir()
			if c.prepare != nil {
				c.prepare(cache)
			}
			m := mirror
			if c.mirror != "" {
				m = c.mirror
			}
			out, manifestPath, err := runFetchSh(t, "headers", c.manifest, cache, "NCCLGO_DEBIAN_MIRROR="+m, "NCCLGO_APT_TRUSTED=1")
			assert.Equal(t, 1, exitCode(err), out)
			want := regexp.QuoteMeta(c.want)
			want = strings.NewReplacer(regexp.QuoteMeta("{M}"), regexp.QuoteMeta(manifestPath), regexp.QuoteMeta("{C}"), regexp.QuoteMeta(cache),
				regexp.QuoteMeta("(.+)"), "(.+)").Replace(want)
			msgs := messages(out)
			if assert.Len(t, msgs, 1, out) {
				t.Log(msgs[0])
				assert.Regexp(t, "^"+want+"$", msgs[0])
			}
			assert.NoFileExists(t, filepath.Join(cache, "header", "demo-1.0", ".verified"))
			debs, _ := filepath.Glob(filepath.Join(cache, "apt", "debs", "*.deb"))
			assert.Empty(t, debs, "a .deb that cannot be read is deleted")
		})
	}
}
