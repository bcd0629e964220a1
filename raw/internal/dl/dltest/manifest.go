package dltest

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Pin is one line of headers/manifest.tsv (see its header for the columns).
type Pin struct {
	Kind, Set, Package, Suite, Component, Version, File, SHA256, URL string
}

// Pins reads headers/manifest.tsv of the repository holding the working directory, so
// that tests take the pinned versions from it instead of naming them.
func Pins(t testing.TB) []Pin {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "headers", "manifest.tsv"))
		if err == nil {
			var out []Pin
			for _, line := range strings.Split(string(b), "\n") {
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				f := append(strings.Split(line, "\t"), make([]string, 9)...)
				out = append(out, Pin{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]})
			}
			return out
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no headers/manifest.tsv above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// SetVersion is the version of a set name: "nccl-2.30.7" -> "2.30.7".
func SetVersion(set string) string { return set[strings.LastIndex(set, "-")+1:] }

// VersionLess orders dotted versions numerically: 2.9.1 < 2.10.0.
func VersionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}

// PinnedSets lists the sets of one kind ("header", "lib") whose names start with prefix
// ("nccl-"), oldest version first.
func PinnedSets(t testing.TB, kind, prefix string) []string {
	t.Helper()
	var out []string
	for _, p := range Pins(t) {
		if p.Kind == kind && strings.HasPrefix(p.Set, prefix) {
			out = append(out, p.Set)
		}
	}
	sort.Slice(out, func(i, j int) bool { return VersionLess(SetVersion(out[i]), SetVersion(out[j])) })
	if len(out) == 0 {
		t.Fatalf("headers/manifest.tsv pins no %s %s*", kind, prefix)
	}
	return out
}

// NewestHeader is the newest pinned header set starting with prefix: the one the raw
// package is generated from.
func NewestHeader(t testing.TB, prefix string) string {
	t.Helper()
	s := PinnedSets(t, "header", prefix)
	return s[len(s)-1]
}
