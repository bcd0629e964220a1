package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// missing skips t for a tool the test needs; under NCCLGO_STRICT (make test, CI) it fails.
func missing(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("NCCLGO_STRICT") != "" {
				t.Fatalf("%s not found (NCCLGO_STRICT is set: a missing prerequisite fails)", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
}

// debPkg is one binary package of a fixture archive: files maps a path below / to its
// content (files under usr/bin are executable).
type debPkg struct {
	name, version, suite, comp string
	files                      map[string][]byte
}

// debFile is the name apt gives the .deb of p.
func (p debPkg) debFile() string { return p.name + "_" + p.version + "_amd64.deb" }

// newDebRepo builds a small Debian archive with dpkg-deb (pool/, and per suite
// dists/<suite>/Release and <component>/binary-amd64/Packages, unsigned: fetch.sh marks it
// trusted under NCCLGO_APT_TRUSTED=1) and serves it on loopback. It returns the mirror URL.
func newDebRepo(t *testing.T, pkgs ...debPkg) string {
	t.Helper()
	root := t.TempDir()
	packages := map[string]map[string]*bytes.Buffer{} // suite -> component -> Packages
	for _, p := range pkgs {
		stage := t.TempDir()
		for f, data := range p.files {
			dest := filepath.Join(stage, f)
			require.NoError(t, os.MkdirAll(filepath.Dir(dest), 0o755))
			mode := os.FileMode(0o644)
			if strings.HasPrefix(f, "usr/bin/") {
				mode = 0o755
			}
			require.NoError(t, os.WriteFile(dest, data, mode))
		}
		control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: ncclgo tests <tests@ncclgo.invalid>\n"+
			"Description: fixture of headers/fetch.sh\n", p.name, p.version)
		require.NoError(t, os.MkdirAll(filepath.Join(stage, "DEBIAN"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(stage, "DEBIAN", "control"), []byte(control), 0o644))
		rel := path.Join("pool", p.comp, p.debFile())
		require.NoError(t, os.MkdirAll(filepath.Join(root, "pool", p.comp), 0o755))
		out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "--build", stage, filepath.Join(root, rel)).CombinedOutput()
		require.NoError(t, err, string(out))
		deb, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		if packages[p.suite] == nil {
			packages[p.suite] = map[string]*bytes.Buffer{}
		}
		if packages[p.suite][p.comp] == nil {
			packages[p.suite][p.comp] = &bytes.Buffer{}
		}
		fmt.Fprintf(packages[p.suite][p.comp], "%sFilename: %s\nSize: %d\nSHA256: %s\n\n", control, rel, len(deb), sum(deb))
	}
	for suite, comps := range packages {
		names := make([]string, 0, len(comps))
		for c := range comps {
			names = append(names, c)
		}
		slices.Sort(names)
		var release strings.Builder
		fmt.Fprintf(&release, "Origin: ncclgo-test\nLabel: ncclgo-test\nSuite: %s\nCodename: %s\nDate: %s\nArchitectures: amd64\nComponents: %s\nSHA256:\n",
			suite, suite, time.Now().UTC().Format(time.RFC1123), strings.Join(names, " "))
		for _, c := range names {
			rel := path.Join(c, "binary-amd64", "Packages")
			data := comps[c].Bytes()
			dest := filepath.Join(root, "dists", suite, rel)
			require.NoError(t, os.MkdirAll(filepath.Dir(dest), 0o755))
			require.NoError(t, os.WriteFile(dest, data, 0o644))
			fmt.Fprintf(&release, " %s %d %s\n", sum(data), len(data), rel)
		}
		require.NoError(t, os.WriteFile(filepath.Join(root, "dists", suite, "Release"), []byte(release.String()), 0o644))
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(root)))
	t.Cleanup(srv.Close)
	return srv.URL
}

// manifestLine is one Debian line of headers/manifest.tsv for file of p.
func (p debPkg) manifestLine(kind, set, file string) string {
	return strings.Join([]string{kind, set, p.name, p.suite, p.comp, p.version, file, sum(p.files[file])}, "\t") + "\n"
}
