package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The handle style of Open MPI: extern objects, and macros casting their addresses.
const globalsExtra = `struct fakePredef_st;
typedef struct fakeComm_st *fakeComm_t;
extern struct fakePredef_st fakeWorldObj;
extern struct fakePredef_st fakeSelfObj;
#define FAKE_GLOBAL(type, global) ((type) ((void *) &(global)))
#define FAKE_WORLD FAKE_GLOBAL(fakeComm_t, fakeWorldObj)
#define FAKE_SELF ((fakeComm_t) &fakeSelfObj)
#define FAKE_ANY ((void *) &(fakeWorldObj))
typedef int (fakeCallback_fn)(void *buf, int *len);
typedef fakeCallback_fn fakeCallback_old;
fakeResult_t fakeRegister(fakeCallback_fn *fn, fakeComm_t comm);`

func TestGlobalAddressMacrosBecomeAccessorsResolvingTheGlobal(t *testing.T) {
	skip := Skip{Kind: "macro", Match: "^FAKE_GLOBAL$", Reason: "cast helper"}
	cfg, root, cache := fakeSetup(t, globalsExtra, skip)
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, cache, &out))
	assert.Regexp(t, `variable\s+2 found =\s+2 emitted \+\s+0 skipped`, out.String())
	files := readTree(t, root)
	g := files[filepath.Join("raw", "fake", "zglobals.go")]
	require.NotEmpty(t, g, "zglobals.go is written when the header has global-address macros")
	assert.Contains(t, g, `_global_fakeWorldObj = dl.Symbol{Name: "fakeWorldObj", Since: "1.0"}`)
	assert.Contains(t, g, "func World() (Comm, error) {\n\tp, err := lib.Resolve(&_global_fakeWorldObj)\n\treturn Comm(p), err\n}")
	assert.Contains(t, g, "func Self() (Comm, error) {", "a cast without the void * step")
	assert.Contains(t, g, "func Any() (uintptr, error) {", "a void * address is a uintptr")
	snap := files[filepath.Join("gen", "snapshot", "fake-1.0.txt")]
	assert.Contains(t, snap, "global FAKE_WORLD: (fakeComm_t)&fakeWorldObj\n")
	assert.Contains(t, snap, "global FAKE_ANY: (void *)&fakeWorldObj\n")

	// A function typedef is the address of such a function; a pointer to it passes as one.
	types := files[filepath.Join("raw", "fake", "ztypes.go")]
	assert.Contains(t, types, "type CallbackFn uintptr")
	assert.Contains(t, types, "type CallbackOld = CallbackFn")
	funcs := files[filepath.Join("raw", "fake", "zfuncs_cgo.go")]
	assert.Contains(t, funcs, "func Register(fn CallbackFn, comm Comm) error {")
	assert.Contains(t, funcs, "typedef int fakeCallback_fn(void *buf, int *len);")
	assert.NotContains(t, files[filepath.Join("raw", "fake", "zlayout_test.go")], `"fakeCallback_fn"`,
		"a function type has no size to check")
}

func TestGlobalNoMacroAddressesIsAnErrorUnlessSkipped(t *testing.T) {
	extra := "struct fakePredef_st;\nextern struct fakePredef_st fakeLonely;"
	cfg, root, cache := fakeSetup(t, extra)
	err := generate(cfg, root, cache, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "variable fakeLonely: extern object that no macro of the header takes the address of")
	cfg, root, cache = fakeSetup(t, extra, Skip{Kind: "variable", Match: "^fakeLonely$", Reason: "internal"})
	require.NoError(t, generate(cfg, root, cache, io.Discard))
}

func TestNoGlobalsWritesNoGlobalsFile(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	_, ok := readTree(t, root)[filepath.Join("raw", "fake", "zglobals.go")]
	assert.False(t, ok, "headers without such macros (nccl.h, cuda.h) keep their files")
}

func TestScalarResultNeedsAGoResultType(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "int fakeStatus(int flag);")
	cfg.Result = "int"
	require.ErrorContains(t, cfg.validate(), "set resultType")
	cfg.ResultType = "Code"
	require.NoError(t, cfg.validate())
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	funcs := readTree(t, root)[filepath.Join("raw", "fake", "zfuncs_cgo.go")]
	assert.Contains(t, funcs, "func Status(flag int32) error {")
	assert.Contains(t, funcs, "return resultError(Code(C."+cfg.CPrefix+"tramp_fakeStatus(")
}

func TestEnumWithoutTagOrTypedefGivesUntypedConstants(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "enum { FAKE_MODE_A, FAKE_MODE_B = 7 };")
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, cache, &out))
	assert.Regexp(t, `enumerator\s+5 found =\s+5 emitted \+\s+0 skipped`, out.String(), "3 of fakeResult_t + 2")
	files := readTree(t, root)
	types := files[filepath.Join("raw", "fake", "ztypes.go")]
	assert.Contains(t, types, "ModeB = 7")
	assert.Contains(t, files[filepath.Join("raw", "fake", "zlayout_test.go")], `"FAKE_MODE_B"`, "checked against gcc")
}

// The API of an Open MPI style header (globals addressed by macros, function typedefs,
// enumerators of an untagged enum) goes through the committed model whole: without the
// header the package comes out byte for byte as from it.
func TestGlobalsAndAnonymousEnumeratorsRoundTripThroughTheModel(t *testing.T) {
	skip := Skip{Kind: "macro", Match: "^FAKE_GLOBAL$", Reason: "cast helper"}
	cfg, root, cache := fakeSetup(t, globalsExtra+"\nenum { FAKE_MODE_A, FAKE_MODE_B = 7 };", skip)
	api, err := parseSet(cfg, root, cache, cfg.Target())
	require.NoError(t, err)
	require.Len(t, api.Globals, 3)
	b, err := encodeModel(cfg, api)
	require.NoError(t, err)
	back, err := decodeModel(cfg, b)
	require.NoError(t, err)
	assert.Equal(t, api.Globals, back.Globals)
	var enumerators []string
	for _, c := range back.Consts {
		if c.Enumerator {
			enumerators = append(enumerators, c.Name)
		}
	}
	assert.Equal(t, []string{"FAKE_MODE_A", "FAKE_MODE_B"}, enumerators)

	require.NoError(t, generate(cfg, root, cache, io.Discard))
	want := readTree(t, root)
	require.Contains(t, want, filepath.Join("raw", "fake", "zglobals.go"))
	require.NoError(t, os.RemoveAll(filepath.Join(root, "raw")))
	var out bytes.Buffer
	require.NoError(t, generate(cfg, root, t.TempDir(), &out))
	assert.Contains(t, out.String(), "generated from the committed model")
	assert.Equal(t, want, readTree(t, root))
}

// A scalar result (MPI's int error codes) gets its Go type and resultError in zerrors.go;
// a message function writing into a buffer of a macro's size gives the text.
func TestScalarResultErrorsAreGenerated(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "int fakeStatus(int flag);\nint fakeErrText(int code, char *buf, int *len);\n#define FAKE_SUCCESS 0\n#define FAKE_MAX_TEXT 64")
	cfg.Result, cfg.ResultType = "int", "Code"
	cfg.Errors = &ErrorsConfig{Success: "FAKE_SUCCESS", Message: []string{"fakeErrText"}, Number: "code"}
	require.NoError(t, cfg.validate())
	require.ErrorContains(t, generate(cfg, root, cache, io.Discard), "or, with errors.buffer, int f(int, char *, int *)")
	cfg.Errors.Buffer = "FAKE_MAX_TEXT"
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	errs := readTree(t, root)[filepath.Join("raw", "fake", "zerrors.go")]
	assert.Contains(t, errs, "\ntype Code int32\n")
	assert.Contains(t, errs, "var buf [MaxText]byte")
	assert.Contains(t, errs, "if ErrText(int32(r), &buf[0], &n) == nil && n > 0 && int(n) <= len(buf) {")
	assert.Contains(t, errs, `return "fake: code " + strconv.Itoa(int(r))`)
	assert.Contains(t, errs, "func resultError(r Code) error {\n\tif r == Success {")
}
