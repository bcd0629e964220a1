package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchEmitsARecorderAndOneCLoop generates the fake package with a batch of
// fakeOnDone (a handle, a callback handle and a void *) and fakeName as the detail
// function: a Batch method per function, one C case per op casting each stored integer
// back to its parameter type, and the detail call with zero arguments.
func TestBatchEmitsARecorderAndOneCLoop(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	cfg.Batch = &BatchConfig{Functions: []string{"fakeOnDone"}, Detail: "fakeName", Reason: "Reason-of-the-test."}
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, filepath.Join(root, "raw", "fake"))
	common, cgo := files["zbatch.go"], files["zbatch_cgo.go"]
	require.NotEmpty(t, common)
	require.NotEmpty(t, cgo)
	require.Contains(t, files, "zbatch_nocgo.go")
	assert.Contains(t, common, "func (b *Batch) OnDone(h Handle, cb Callback, userData unsafe.Pointer) error {")
	assert.Contains(t, common, "r.args[2] = uint64(uintptr(userData))")
	assert.Contains(t, common, "batchArgs = 3")
	assert.Contains(t, cgo, "case 1: // fakeOnDone")
	assert.Contains(t, cgo, "(fakeHandle_t)(uintptr_t)r[i].a[0]")
	assert.Contains(t, cgo, "(void *)(uintptr_t)r[i].a[2]")
	assert.Contains(t, cgo, "detail)((fakeResult_t)0)", "the detail function gets zero for each parameter")
	assert.Contains(t, common, "Reason-of-the-test.", "the reason is in the doc")

	// Generating again gives the same bytes.
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	assert.Equal(t, files, readTree(t, filepath.Join(root, "raw", "fake")))
}

// TestBatchRecordsAnInputPointerByAddress: a typed pointer listed under inputs is a
// Batch parameter of type unsafe.Pointer, kept as its address and cast back to its C
// type; an input that names no typed pointer parameter is an error.
func TestBatchRecordsAnInputPointerByAddress(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "")
	cfg.Batch = &BatchConfig{Functions: []string{"fakeSize"}, Reason: "r",
		Inputs: []BatchInput{{Function: "fakeSize", Param: "bytes", Reason: "the test's"}}}
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	files := readTree(t, filepath.Join(root, "raw", "fake"))
	assert.Contains(t, files["zbatch.go"], "func (b *Batch) Size(h Handle, bytes unsafe.Pointer) error {")
	assert.Contains(t, files["zbatch.go"], "r.args[1] = uint64(uintptr(bytes))")
	assert.Contains(t, files["zbatch_cgo.go"], "(size_t *)(uintptr_t)r[i].a[1]")

	for _, in := range []BatchInput{{Function: "fakeSize", Param: "h", Reason: "r"}, {Function: "fakeSize", Param: "bytes"}} {
		cfg, root, cache := fakeSetup(t, "")
		cfg.Batch = &BatchConfig{Functions: []string{"fakeSize"}, Reason: "r", Inputs: []BatchInput{in}}
		assert.Error(t, generate(cfg, root, cache, io.Discard), "input %+v", in)
	}
}

// TestBatchRejectsWhatCannotBeRecorded: each unrecordable function is an error naming it
// and why.
func TestBatchRejectsWhatCannotBeRecorded(t *testing.T) {
	tests := []struct {
		name  string
		batch BatchConfig
		want  string
	}{
		{"typed out-pointer", BatchConfig{Functions: []string{"fakeSize"}, Reason: "r"}, "fakeSize: parameter bytes is a typed pointer"},
		{"void result", BatchConfig{Functions: []string{"fakeReset"}, Reason: "r"}, "batch function fakeReset does not return fakeResult_t"},
		{"undeclared", BatchConfig{Functions: []string{"fakeNope"}, Reason: "r"}, "batch function fakeNope is not declared"},
		{"twice", BatchConfig{Functions: []string{"fakeOnDone", "fakeOnDone"}, Reason: "r"}, "fakeOnDone is listed twice"},
		{"detail not a string", BatchConfig{Functions: []string{"fakeOnDone"}, Detail: "fakeOnDone", Reason: "r"}, "does not return const char *"},
		{"no reason", BatchConfig{Functions: []string{"fakeOnDone"}}, "batch needs functions and a reason"},
		{"no functions", BatchConfig{Reason: "r"}, "batch needs functions and a reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, root, cache := fakeSetup(t, "")
			cfg.Batch = &tt.batch
			err := generate(cfg, root, cache, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
