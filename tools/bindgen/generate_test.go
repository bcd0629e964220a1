package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSetup puts testdata/fake.h into a header cache as two sets, fake-0.9 (without
// fakeSize) and fake-1.0 (with it, and with extra declarations), and returns a config.
func fakeSetup(t *testing.T, extra string, skip ...Skip) (cfg *Config, root, cache string) {
	t.Helper()
	src, err := os.ReadFile("testdata/fake.h")
	require.NoError(t, err)
	cache, root = t.TempDir(), t.TempDir()
	for set, text := range map[string]string{
		"fake-0.9": "#define FAKE_OLD 1\n" + string(src),
		"fake-1.0": strings.Replace(string(src), "/* EXTRA */", extra, 1),
	} {
		dir := filepath.Join(cache, "header", set)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "fake.h"), []byte(text), 0o644))
	}
	cfg = &Config{Package: "fake", Out: "raw/fake", Header: "fake.h", Result: "fakeResult_t",
		Sets: []string{"fake-0.9", "fake-1.0"}, Settings: []Setting{{Name: "default"}},
		Prefixes: []string{"FAKE_", "fake"}, Skip: skip, Headers: HeadersConfig{Dir: "header/{set}", Manifest: "headers/manifest.tsv", Fetch: "make headers"}}
	require.NoError(t, cfg.validate())
	return cfg, root, cache
}

// extraLine is the line of testdata/fake.h where the extra declarations go.
func extraLine(t *testing.T) int {
	src, err := os.ReadFile("testdata/fake.h")
	require.NoError(t, err)
	before, _, ok := strings.Cut(string(src), "/* EXTRA */")
	require.True(t, ok)
	return strings.Count(before, "\n") + 1
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return err
	}))
	return files
}

func TestGenerateIsDeterministic(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	first := readTree(t, root)
	require.NotEmpty(t, first)
	root2 := t.TempDir()
	require.NoError(t, generate(cfg, root2, cache, io.Discard))
	assert.Equal(t, first, readTree(t, root2))
	assert.Contains(t, first, filepath.Join("raw", "fake", "ztypes.go"))
	assert.Contains(t, first, filepath.Join("gen", "snapshot", "fake-0.9.txt"))
}

func TestGenerateWritesSnapshotsAndSince(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, root)
	snap := files[filepath.Join("gen", "snapshot", "fake-1.0.txt")]
	for _, line := range []string{
		"func fakeOpen -> fakeOpen_v2: fakeResult_t fakeOpen_v2(fakeHandle_t *h, const fakeDesc *desc, fakeId id)",
		"func fakeSize -> fakeSize: fakeResult_t fakeSize(const fakeHandle_t h, size_t *bytes)",
		"func fakeName -> fakeName: const char *fakeName(fakeResult_t r)",
		"type struct fakeDesc_st: struct size 40 align 8",
		"  name @0: const char *",
		"  value @16: union fakeDesc_st.value",
		"  (anonymous 3) @24: struct fakeDesc_st.3",
		"  scale @32: double",
		"type fakeDesc: typedef fakeDesc_v1 fakeDesc",
		"type fakeHandle_t: typedef struct fakeHandle_st *fakeHandle_t",
		"enumerator fakeNeg: -1 (fakeResult_t)",
		"const FAKE_BIG: 3405692655 (unsigned)",
		"const FAKE_LABEL: \"fake\"",
		"const FAKE_HALF: 0.5 (floating)",
		"const FAKE_NULL: (void *)0x0",
		"const FAKE_STREAM_LEGACY: (fakeHandle_t)0x1",
		"const FAKE_UNDEF_INT: -2147483648",
	} {
		assert.Contains(t, snap, line+"\n")
	}
	assert.NotContains(t, files[filepath.Join("gen", "snapshot", "fake-0.9.txt")], "fakeSize")
	syms := files[filepath.Join("raw", "fake", "zsymbols.go")]
	assert.Contains(t, syms, `_sym_fakeSize    = dl.Symbol{Name: "fakeSize", Since: "1.0"}`)
	assert.Contains(t, syms, `_sym_fakeOpen_v2 = dl.Symbol{Name: "fakeOpen_v2", Since: "0.9"}`)
	funcs := files[filepath.Join("raw", "fake", "zfuncs_cgo.go")]
	assert.Contains(t, funcs, "func Open(h *Handle, desc *Desc, id Id) error {")
	assert.Contains(t, funcs, "func Name(rArg Result) (r string, err error) {")
	assert.Contains(t, funcs, "*(*C.fakeId)(unsafe.Pointer(&id))")
	assert.Contains(t, funcs, "#cgo noescape _fake_tramp_fakeOpen_v2")
}

func TestUntranslatableDeclarationsFailWithPositionUnlessSkipped(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		skip  Skip
		want  string
	}{
		{"variadic function", "void fakeLog(const char *fmt, ...);",
			Skip{Kind: "function", Match: "^fakeLog$", Reason: "variadic"},
			"function fakeLog: variadic functions cannot be called through a trampoline"},
		{"variable", "extern int fakeCounter;",
			Skip{Kind: "variable", Match: "^fakeCounter$", Reason: "a global"},
			"variable fakeCounter: extern object that no macro of the header takes the address of"},
		{"function-like macro", "#define FAKE_VERSION(x) ((x) * 100)",
			Skip{Kind: "macro", Match: "^FAKE_VERSION$", Reason: "function-like"},
			"macro FAKE_VERSION: function-like macro"},
		{"brace initializer", "#define FAKE_INIT { 1, 2 }",
			Skip{Kind: "macro", Match: "^FAKE_INIT$", Reason: "brace initializer"},
			"macro FAKE_INIT: no constant value"},
		{"static inline definition", "static inline int fakeTwice(int x) { return 2 * x; }",
			Skip{Kind: "function", Match: "^fakeTwice$", Reason: "defined in the header"},
			"function fakeTwice: function defined in the header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, root, cache := fakeSetup(t, tt.extra)
			err := generate(cfg, root, cache, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "add a skip entry with a reason")
			assert.Regexp(t, fmt.Sprintf(`^fake\.h:%d:\d+: %s`, extraLine(t), regexp.QuoteMeta(tt.want)), err.Error())

			cfg, root, cache = fakeSetup(t, tt.extra, tt.skip)
			var out bytes.Buffer
			require.NoError(t, generate(cfg, root, cache, &out))
			assert.Contains(t, out.String(), "1 skipped: "+tt.skip.Reason)
		})
	}
}

func TestSummaryAddsUpToTheHeaderTotals(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, cache, &out))
	for _, want := range []string{
		`enum\s+1 found =\s+1 emitted \+\s+0 skipped`,
		`function\s+5 found =\s+5 emitted \+\s+0 skipped`,
		`enumerator\s+3 found =\s+3 emitted \+\s+0 skipped`,
		`struct\s+3 found =\s+3 emitted \+\s+0 skipped`,
		`union\s+1 found =\s+1 emitted \+\s+0 skipped`,
		`typedef\s+4 found =\s+4 emitted \+\s+0 skipped`,
		`macro\s+9 found =\s+7 emitted \+\s+2 skipped`,
		`1 skipped: empty definition`,
		`1 skipped: names a function`,
	} {
		assert.Regexp(t, want, out.String())
	}
}

func TestMissingHeaderSaysRunMakeHeaders(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, os.RemoveAll(filepath.Join(cache, "header", "fake-1.0")))
	err := generate(cfg, root, cache, io.Discard)
	require.ErrorIs(t, err, ErrNoHeaders)
	assert.Contains(t, err.Error(), "run make headers")
	assert.Contains(t, err.Error(), "fake-1.0")
}

func TestOlderSetFallsBackToItsCommittedSnapshot(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	want := readTree(t, root)
	require.NoError(t, os.RemoveAll(filepath.Join(cache, "header", "fake-0.9")))
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, cache, &out))
	assert.Contains(t, out.String(), "not cached, read from their committed snapshots: fake-0.9")
	assert.Equal(t, want, readTree(t, root), "Since still comes from the 0.9 snapshot")
}

func TestNameCollisionIsAnErrorUntilRenamed(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "typedef int fakeOk_t;")
	err := generate(cfg, root, cache, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "both become Ok")
	cfg.Rename = []Rename{{C: "fakeOk_t", Go: "OkType", Reason: "the enumerator fakeOk is Ok"}}
	require.NoError(t, cfg.validate())
	require.NoError(t, generate(cfg, root, cache, io.Discard))
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

func TestSettingsMustAgreeOnWhatTheyShare(t *testing.T) {
	tests := []struct{ name, extra, want string }{
		{"typedef", "#ifdef FAKE_WIDE\ntypedef long fakeInt_t;\n#else\ntypedef int fakeInt_t;\n#endif",
			"type fakeInt_t: declared differently in setting wide: long fakeInt_t vs int fakeInt_t"},
		{"macro", "#ifdef FAKE_WIDE\n#define FAKE_WIDTH 64\n#else\n#define FAKE_WIDTH 32\n#endif",
			"macro FAKE_WIDTH: has another value in setting wide"},
		{"function", "#ifdef FAKE_WIDE\nvoid fakeSet(long v);\n#else\nvoid fakeSet(int v);\n#endif",
			"function fakeSet: declared differently in setting wide"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, root, cache := fakeSetup(t, tt.extra)
			cfg.Settings = append(cfg.Settings, Setting{Name: "wide", Defines: []string{"FAKE_WIDE"}})
			err := generate(cfg, root, cache, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestPerSettingSymbolsGetTheirOwnNames(t *testing.T) {
	extra := "#ifdef FAKE_PTDS\n#define fakeCopy fakeCopy_ptds\n#endif\nfakeResult_t fakeCopy(void *dst);\n" +
		"#ifdef FAKE_LEGACY\n#undef fakeOpen\nfakeResult_t fakeOpen(fakeHandle_t *h);\n#endif"
	cfg, root, cache := fakeSetup(t, extra)
	cfg.Settings = append(cfg.Settings,
		Setting{Name: "ptds", Defines: []string{"FAKE_PTDS"}},
		Setting{Name: "legacy", Defines: []string{"FAKE_LEGACY"}})
	cfg.SymbolSuffixes = []string{"_ptds"}
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, root)
	funcs := files[filepath.Join("raw", "fake", "zfuncs_cgo.go")]
	assert.Contains(t, funcs, "func Copy(dst unsafe.Pointer) error {")
	assert.Contains(t, funcs, "func CopyPtds(dst unsafe.Pointer) error {")
	assert.Contains(t, funcs, "func Open(h *Handle, desc *Desc, id Id) error {")
	assert.Contains(t, funcs, "func OpenLegacy(h *Handle) error {")
	assert.Contains(t, funcs, "C._fake_tramp_fakeCopy_ptds(")
	snap := files[filepath.Join("gen", "snapshot", "fake-1.0.txt")]
	assert.Contains(t, snap, "func fakeCopy -> fakeCopy_ptds: fakeResult_t fakeCopy_ptds(void *dst) [ptds]\n")
	assert.Contains(t, snap, "func fakeOpen -> fakeOpen: fakeResult_t fakeOpen(fakeHandle_t *h) [legacy]\n")
	assert.Contains(t, snap, "func fakeName -> fakeName: const char *fakeName(fakeResult_t r) [default ptds legacy]\n")
}

func TestSetsMustBePinnedInTheManifest(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "headers"), 0o755))
	manifest := "# kind\tset\n header\tfake-0.9\tpkg\n"
	require.NoError(t, writeFile(filepath.Join(root, "headers", "manifest.tsv"), manifest+"header\tfake-0.9\tpkg\n"))
	err := generate(cfg, root, cache, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "header set fake-1.0 is not pinned in headers/manifest.tsv")
	require.NoError(t, writeFile(filepath.Join(root, "headers", "manifest.tsv"), manifest+"header\tfake-0.9\tpkg\nheader\tfake-1.0\tpkg\n"))
	require.NoError(t, generate(cfg, root, cache, io.Discard))
}

func TestHistoryTableListsWhatEachSetAdded(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	b, err := history(cfg, root)
	require.NoError(t, err)
	table := string(b)
	assert.Contains(t, table, "| 0.9 | 4 | (oldest pinned) |")
	assert.Contains(t, table, "| 1.0 | 5 | `fakeSize` |")
	assert.Contains(t, table, "go run ./tools/bindgen diff gen/snapshot/fake-0.9.txt gen/snapshot/fake-1.0.txt")
	assert.True(t, strings.HasPrefix(table, "<!-- Code generated by tools/bindgen history"))
}

// A model written under another configuration is refused: its header is needed.
func TestModelOfAnotherConfigurationIsRefused(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	cfg.Rename = append(cfg.Rename, Rename{C: "fakeSize", Go: "Bytes", Reason: "test"})
	err := generate(cfg, root, t.TempDir(), io.Discard)
	require.ErrorContains(t, err, "the model was written under another configuration")
	// With the header the model is rewritten and the rename applies.
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	assert.Contains(t, readTree(t, root)[filepath.Join("raw", "fake", "zfuncs_cgo.go")], "func Bytes(")
}

// Without any header, the package comes out of the committed snapshots and model,
// byte for byte as from the headers.
func TestGenerationFromTheCommittedModelEqualsGenerationFromHeaders(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	want := readTree(t, root)
	require.NoError(t, os.RemoveAll(filepath.Join(root, "raw")))
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, t.TempDir(), &out))
	assert.Contains(t, out.String(), "fake-1.0 not cached: the package is generated from the committed model gen/snapshot/fake-1.0.api.json")
	assert.Equal(t, want, readTree(t, root))
}

// The model file holds the whole API: decoding what was encoded gives it back.
func TestModelRoundTrips(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	api, err := parseSet(cfg, root, cache, cfg.Target())
	require.NoError(t, err)
	b, err := encodeModel(cfg, api)
	require.NoError(t, err)
	back, err := decodeModel(cfg, b)
	require.NoError(t, err)
	b2, err := encodeModel(cfg, back)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(b2))
	assert.Equal(t, len(api.Funcs), len(back.Funcs))
	assert.Equal(t, len(api.Types), len(back.Types))
	var generic struct{ API map[string]json.RawMessage }
	require.NoError(t, json.Unmarshal(b, &generic))
	assert.Len(t, generic.API, reflect.TypeOf(API{}).NumField(), "every field of API is in the file")
}

// A pointer macro whose value lies in the null page (MPI_IN_PLACE is (void *)1) says
// that no Go pointer may hold it; null itself and typed handles (a stream) do not.
func TestNullPagePointerMacrosSayHowToPassThem(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "#define FAKE_IN_PLACE ((void *)1)")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	types := readTree(t, root)[filepath.Join("raw", "fake", "ztypes.go")]
	before, _, ok := strings.Cut(types, "\tInPlace uintptr = 0x1\n")
	require.True(t, ok, types)
	assert.True(t, strings.HasSuffix(before, "\t// InPlace is FAKE_IN_PLACE.\n\t//\n\t// "+nullPageDoc+"\n"), before[max(0, len(before)-600):])
	assert.Equal(t, 1, strings.Count(types, nullPageDoc), "only FAKE_IN_PLACE has the note")
}
