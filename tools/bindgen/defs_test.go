package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const defsExtra = `#define FAKE_VERSION(X, Y) ((X) * 100 + \
    (Y))
#define FAKE_MINOR 2
#define FAKE_UNUSED 7
#define FAKE_INIT { sizeof(fakeDesc), /* version */ FAKE_VERSION(1, FAKE_MINOR), NOT_A_MACRO }
`

// TestMacroDefinitionsAreRecordedInTheSnapshot: the definitions macroDefinitions names,
// with those of the header's macros their bodies use (transitively, not the parameters),
// are in the snapshot and the model as written (tokens, no comments or continuations);
// an older set without the macro records nothing, a target without it is an error.
func TestMacroDefinitionsAreRecordedInTheSnapshot(t *testing.T) {
	skip := Skip{Kind: "macro", Match: "^FAKE_(VERSION|INIT)$", Reason: "no value"}
	cfg, root, cache := fakeSetup(t, defsExtra, skip)
	cfg.MacroDefinitions = []string{"FAKE_INIT"}
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	snap, err := os.ReadFile(filepath.Join(root, "gen", "snapshot", "fake-1.0.txt"))
	require.NoError(t, err)
	var defs []string
	for _, l := range strings.Split(string(snap), "\n") {
		if strings.HasPrefix(l, "define ") {
			defs = append(defs, l)
		}
	}
	assert.Equal(t, []string{
		"define FAKE_INIT: { sizeof(fakeDesc), FAKE_VERSION(1, FAKE_MINOR), NOT_A_MACRO }",
		"define FAKE_MINOR: 2",
		"define FAKE_VERSION(X,Y): ((X) * 100 + (Y))",
	}, defs)
	old, err := os.ReadFile(filepath.Join(root, "gen", "snapshot", "fake-0.9.txt"))
	require.NoError(t, err)
	assert.NotContains(t, string(old), "define ")
	model, err := os.ReadFile(filepath.Join(root, "gen", "snapshot", "fake-1.0.api.json"))
	require.NoError(t, err)
	api, err := decodeModel(cfg, model)
	require.NoError(t, err)
	require.Len(t, api.Defines, 3)
	assert.Equal(t, &Define{Name: "FAKE_VERSION", Params: []string{"X", "Y"}, FnLike: true, Body: "((X) * 100 + (Y))", Pos: api.Defines[2].Pos}, api.Defines[2])

	// bindgen diff shows a changed definition.
	changed := strings.Replace(string(snap), "define FAKE_MINOR: 2", "define FAKE_MINOR: 3", 1)
	a, err := readSnapshot(bytes.NewReader(snap))
	require.NoError(t, err)
	b, err := readSnapshot(strings.NewReader(changed))
	require.NoError(t, err)
	var out bytes.Buffer
	require.True(t, diffSnapshots(&out, "a", "b", a, b))
	assert.Contains(t, out.String(), "changed definitions (1):\n  ~ define FAKE_MINOR\n      old: 2\n      new: 3")

	// A macro the target does not define is a configuration error.
	cfg.MacroDefinitions = []string{"FAKE_INIT", "FAKE_NOWHERE"}
	err = generate(cfg, t.TempDir(), cache, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "macro FAKE_NOWHERE: macroDefinitions names it, but the header does not define it")
}

// A macro one setting defines is recorded; the target lacks it only if no setting
// defines it.
func TestMacroDefinitionsFromAnySetting(t *testing.T) {
	cfg, root, cache := fakeSetup(t, "#ifdef FAKE_EXTRA\n#define FAKE_ONLY_EXTRA (FAKE_BASE + 1)\n#endif\n#define FAKE_BASE 4\n")
	cfg.Settings = []Setting{{Name: "default"}, {Name: "extra", Defines: []string{"FAKE_EXTRA"}}}
	cfg.MacroDefinitions = []string{"FAKE_ONLY_EXTRA"}
	require.NoError(t, generate(cfg, root, cache, io.Discard))
	snap, err := os.ReadFile(filepath.Join(root, "gen", "snapshot", "fake-1.0.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(snap), "\ndefine FAKE_BASE: 4\ndefine FAKE_ONLY_EXTRA: (FAKE_BASE + 1)\n")
}
