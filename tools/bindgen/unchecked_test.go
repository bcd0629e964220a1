package main

import (
	"io"
	"path/filepath"
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
