package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUncheckedPointersPassBuffersAsCharPointers generates the fake package with and
// without a rule naming fakeOnDone's void *userData: with it, the argument crosses as
// *C.char into a char * trampoline parameter (cgo does not check it) and the doc says
// so; without it, as unsafe.Pointer into void *. No other function changes.
func TestUncheckedPointersPassBuffersAsCharPointers(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	plain := readTree(t, filepath.Join(root, "raw", "fake"))
	assert.Contains(t, plain["zfuncs_cgo.go"], "unsafe.Pointer(userData)")
	assert.NotContains(t, plain["zfuncs_cgo.go"], "char *a2")

	cfg, root, cache = fakeSetup(t, "")
	cfg.Unchecked = []UncheckedPointers{{Function: "^fakeOnDone$", Param: "^userData$", Reason: "data"}}
	require.NoError(t, cfg.validate())
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, filepath.Join(root, "raw", "fake"))
	cgo := files["zfuncs_cgo.go"]
	assert.Contains(t, cgo, "(*C.char)(unsafe.Pointer(userData))")
	assert.Contains(t, cgo, "char *a2) {")
	assert.Contains(t, cgo, "(void *)a2)", "the trampoline passes it on as the header's type")
	assert.Contains(t, cgo, "// userData is passed without cgo's pointer check: never pass Go memory that holds Go pointers.")
	assert.NotEqual(t, plain["zfuncs_nocgo.go"], files["zfuncs_nocgo.go"], "the stub's doc says it too")
	for name, text := range plain {
		if name != "zfuncs_cgo.go" && name != "zfuncs_nocgo.go" {
			assert.Equal(t, text, files[name], "%s does not change", name)
		}
	}
}

// TestUncheckedPointersRulesAreChecked: a rule needs both patterns and a reason, valid
// regular expressions, and must match a parameter.
func TestUncheckedPointersRulesAreChecked(t *testing.T) {
	for _, tc := range []struct {
		rule UncheckedPointers
		want string
	}{
		{UncheckedPointers{Function: "^fake", Param: "^userData$"}, "needs function, param and a reason"},
		{UncheckedPointers{Function: "(", Param: "x", Reason: "r"}, "function: error parsing regexp"},
		{UncheckedPointers{Function: "x", Param: "(", Reason: "r"}, "param: error parsing regexp"},
	} {
		cfg, _, _ := fakeSetup(t, "")
		cfg.Unchecked = []UncheckedPointers{tc.rule}
		err := cfg.validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	cfg, root, cache := fakeSetup(t, "")
	// desc is a typed pointer (const fakeDesc *), not void *: the rule matches nothing.
	cfg.Unchecked = []UncheckedPointers{{Function: "^fakeOpen$", Param: "^desc$", Reason: "r"}}
	require.NoError(t, cfg.validate())
	err := generate(cfg, root, cache, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `uncheckedPointers entry 0 (function "^fakeOpen$", param "^desc$") matches no void * parameter`)
}

// TestUncheckedPointerSentinelsAreSwappedInC: a rule's sentinel (a pointer macro in
// the null page) gets a Go variable, the address of a C byte, which the trampoline of
// every matching parameter turns into the macro's value; the constant's and the
// function's docs name the variable. A sentinel that is not a pointer macro of the
// header is an error.
func TestUncheckedPointerSentinelsAreSwappedInC(t *testing.T) {
	const extra = "#define FAKE_IN_PLACE ((void *)1)\n#define FAKE_TWO 2\n"
	cfg, root, cache := fakeSetup(t, extra)
	cfg.Unchecked = []UncheckedPointers{{Function: "^fakeOnDone$", Param: "^userData$", Reason: "data", Sentinels: []string{"FAKE_IN_PLACE"}}}
	require.NoError(t, cfg.validate())
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, filepath.Join(root, "raw", "fake"))
	fn := cfg.CPrefix + "sentinel_FAKE_IN_PLACE"
	cgo := files["zfuncs_cgo.go"]
	assert.Contains(t, cgo, "static void *"+fn+"(void) { static char at; return &at; }")
	assert.Contains(t, cgo, "\tif (a2 == (char *)"+fn+"()) a2 = (char *)(uintptr_t)0x1;\n", "the trampoline swaps it before the call")
	assert.Equal(t, 1, strings.Count(cgo, "(uintptr_t)0x1;"), "only the matching parameter is swapped")
	assert.Contains(t, cgo, "var InPlacePtr = unsafe.Pointer(C."+fn+"())")
	assert.Contains(t, cgo, "Where fake.h takes FAKE_IN_PLACE, pass InPlacePtr.")
	assert.Contains(t, files["zfuncs_nocgo.go"], "var InPlacePtr = unsafe.Pointer(new(byte))")
	types := files["ztypes.go"]
	assert.Contains(t, types, "\t// "+nullPageSentinelDoc("InPlacePtr")+"\n\tInPlace uintptr = 0x1\n")
	assert.NotContains(t, types, nullPageDoc, "the note names the variable instead")

	for _, bad := range []string{"FAKE_TWO", "FAKE_NONE"} {
		cfg, root, cache := fakeSetup(t, extra)
		cfg.Unchecked = []UncheckedPointers{{Function: "^fakeOnDone$", Param: "^userData$", Reason: "data", Sentinels: []string{bad}}}
		require.NoError(t, cfg.validate())
		err := generate(cfg, root, cache, io.Discard)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "uncheckedPointers entry 0: sentinel "+bad+" is not a pointer macro")
	}
}
