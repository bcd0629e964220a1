package dltest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// optionalSources are the manifest suites CI cannot reach (headers/manifest.tsv): a
// header set from one of them is read from its committed snapshot, never required.
var optionalSources = map[string]bool{"github": true, "pypi": true}

// RepoFile returns the path of rel (slash-separated) in the repository holding the
// working directory.
func RepoFile(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, filepath.FromSlash(rel))
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = filepath.Dir(dir)
	}
}

// OptionalHeader is Header for a test that can do without the header of set when only
// a host CI cannot reach serves it (its manifest suite is github or pypi): such a set
// that is not cached gives ok false, neither a skip nor, under NCCLGO_STRICT, a
// failure. A set Debian serves is required as by Header.
func OptionalHeader(t testing.TB, set, file string) (dir string, ok bool) {
	t.Helper()
	for _, p := range Pins(t) {
		if p.Kind == "header" && p.Set == set && optionalSources[p.Suite] {
			d := filepath.Join(CacheDir(), "header", set)
			if _, err := os.Stat(filepath.Join(d, file)); err != nil {
				return "", false
			}
			return d, true
		}
	}
	return Header(t, set, file), true
}

// snapshotEntity is one unindented line of an API snapshot (tools/bindgen) and the
// indented lines below it.
type snapshotEntity struct {
	head string
	body []string
}

// readSnapshot reads gen/snapshot/<set>.txt: entities by key ("type ncclConfig_t").
func readSnapshot(t testing.TB, set string) map[string]*snapshotEntity {
	t.Helper()
	path := RepoFile(t, "gen/snapshot/"+set+".txt")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("committed snapshot of %s: %v", set, err)
	}
	m := map[string]*snapshotEntity{}
	var cur *snapshotEntity
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "  "):
			if cur == nil {
				t.Fatalf("%s: detail line before any entity: %q", path, line)
			}
			cur.body = append(cur.body, strings.TrimPrefix(line, "  "))
		default:
			key, head, ok := strings.Cut(line, ": ")
			if !ok {
				t.Fatalf("%s: bad line %q", path, line)
			}
			cur = &snapshotEntity{head: head}
			m[key] = cur
		}
	}
	return m
}

// SnapshotC rebuilds in C, from the committed API snapshot of set (gen/snapshot/<set>.txt),
// what a program needs to use the struct typedef typ and the macros the snapshot records
// the definitions of (gen/*.json's macroDefinitions): the struct with the snapshot's
// members, _Static_assert that every member sits at the snapshot's offset and that size
// and alignment are the snapshot's, then every recorded #define. It includes <stddef.h>,
// <stdint.h> and <limits.h>, where such headers take NULL, the fixed-size integers and
// INT_MIN from. The rebuilt text stands for the header where the header is not cached.
func SnapshotC(t testing.TB, set, typ string) string {
	t.Helper()
	snap := readSnapshot(t, set)
	e := snap["type "+typ]
	if e == nil {
		t.Fatalf("snapshot of %s has no type %s", set, typ)
	}
	// "typedef struct TAG NAME; size N align M" or, for an anonymous struct, "struct size N align M".
	decl, layout, ok := strings.Cut(e.head, "; ")
	if !ok {
		decl, layout = "", e.head
	}
	var size, align int
	if _, err := fmt.Sscanf(strings.TrimPrefix(layout, "struct "), "size %d align %d", &size, &align); err != nil {
		t.Fatalf("snapshot of %s: type %s is not a struct with a layout: %q", set, typ, e.head)
	}
	var members, asserts strings.Builder
	for _, f := range e.body {
		name, rest, ok1 := strings.Cut(f, " @")
		off, ctype, ok2 := strings.Cut(rest, ": ")
		if !ok1 || !ok2 || strings.Contains(ctype, "(") || strings.HasPrefix(name, "(") {
			t.Fatalf("snapshot of %s: member line %q of %s cannot be rebuilt (function pointers and anonymous members are not supported)", set, f, typ)
		}
		if base, dims, isArray := strings.Cut(ctype, " ["); isArray {
			fmt.Fprintf(&members, "\t%s %s[%s;\n", base, name, dims)
		} else {
			fmt.Fprintf(&members, "\t%s %s;\n", ctype, name)
		}
		fmt.Fprintf(&asserts, "_Static_assert(offsetof(%s, %s) == %s, \"%s: %s @%s\");\n", typ, name, off, set, name, off)
	}
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include <stdint.h>\n#include <limits.h>\n\n")
	if tag, ok := strings.CutPrefix(decl, "typedef "); ok {
		tag = strings.TrimSuffix(tag, " "+typ) // "struct ncclConfig_v23000"
		fmt.Fprintf(&b, "%s {\n%s};\ntypedef %s %s;\n", tag, members.String(), tag, typ)
	} else {
		fmt.Fprintf(&b, "typedef struct {\n%s} %s;\n", members.String(), typ)
	}
	fmt.Fprintf(&b, "_Static_assert(sizeof(%s) == %d && _Alignof(%s) == %d, \"%s: size %d align %d\");\n", typ, size, typ, align, set, size, align)
	b.WriteString(asserts.String())
	var defs []string
	for key, d := range snap {
		if name, ok := strings.CutPrefix(key, "define "); ok {
			defs = append(defs, "#define "+name+" "+d.head+"\n")
		}
	}
	if len(defs) == 0 {
		t.Fatalf("snapshot of %s records no macro definition (gen/*.json macroDefinitions)", set)
	}
	sort.Strings(defs)
	b.WriteString("\n" + strings.Join(defs, ""))
	return b.String()
}
