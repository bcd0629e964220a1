package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeBlocks returns the first fenced block of each language ("sh", "json") in one
// section of README.md, as lines.
func readmeBlocks(t *testing.T, section string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(b), "\n## "+section+"\n")
	require.True(t, ok, "README.md has no section %q", section)
	rest, _, _ = strings.Cut(rest, "\n## ")
	blocks := map[string][]string{}
	lang, in, keep := "", false, false
	for _, line := range strings.Split(rest, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			lang, in = strings.TrimPrefix(line, "```"), true
			_, seen := blocks[lang]
			keep = !seen
			if keep {
				blocks[lang] = []string{}
			}
		case in && line == "```":
			in = false
		case in && keep:
			blocks[lang] = append(blocks[lang], line)
		}
	}
	return blocks
}

// TestReadmeRecipeWorksInAFreshModule runs the commands of README.md's "Using it in
// another module", as written, in a new module outside the repository: GOFLAGS unset,
// GOPROXY as the machine has it (the generator's dependencies come from the module proxy
// or cache). The module proxy does not serve this checkout, so a replace directive stands
// in for it and `@latest` becomes `@v0.0.0`, the version the replace serves; nothing
// else differs. The generated package must then build with cgo and without, and pass
// its layout test.
func TestReadmeRecipeWorksInAFreshModule(t *testing.T) {
	blocks := readmeBlocks(t, "Using it in another module")
	require.NotEmpty(t, blocks["sh"], "the section's sh block")
	require.NotEmpty(t, blocks["json"], "the section's json block (gen/demo.json)")
	m := newExtModule(t)
	m.goCmd(nil, "mod", "init", "example.com/demoapp")
	m.goCmd(nil, "mod", "edit", "-replace", "github.com/ncclgo/ncclgo="+m.repo,
		"-replace", "github.com/ncclgo/ncclgo/tools/bindgen="+filepath.Join(m.repo, "tools", "bindgen"))
	m.write("include/demo-1.2.3/demo.h", demoHeader)
	m.write("gen/demo.json", strings.Join(blocks["json"], "\n")+"\n")
	lib := m.library("libdemo.so.1", demoSource, "include/demo-1.2.3")

	var ran []string
	for _, line := range blocks["sh"] {
		cmd, _, _ := strings.Cut(line, "#")
		args := strings.Fields(cmd)
		if len(args) == 0 {
			continue
		}
		require.Equal(t, "go", args[0], "README command %q", line)
		for i, a := range args {
			args[i] = strings.Replace(a, "@latest", "@v0.0.0", 1)
		}
		out, err := m.run(nil, "go", args[1:]...)
		require.NoError(t, err, "README command %q:\n%s", strings.Join(args, " "), out)
		ran = append(ran, strings.Join(args, " "))
	}
	t.Logf("ran: %s", strings.Join(ran, "; "))
	require.FileExists(t, filepath.Join(m.dir, "demo", "zfuncs_cgo.go"))
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "tool github.com/ncclgo/ncclgo/tools/bindgen")

	env := []string{"DEMO_LIBRARY=" + lib}
	m.goCmd(append(env, "CGO_ENABLED=1"), "build", "./...")
	m.goCmd(append(env, "CGO_ENABLED=0"), "vet", "./...")
	require.Contains(t, m.goCmd(append(env, "CGO_ENABLED=1"), "test", "-count=1", "-v", "-run", "TestLayoutMatchesGCC", "./demo/"),
		"--- PASS: TestLayoutMatchesGCC")
	// Regenerating through the tool directive changes nothing.
	before, err := os.ReadFile(filepath.Join(m.dir, "demo", "zfuncs_cgo.go"))
	require.NoError(t, err)
	m.goCmd(nil, "tool", "bindgen", "generate", "gen/demo.json")
	after, err := os.ReadFile(filepath.Join(m.dir, "demo", "zfuncs_cgo.go"))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
}
