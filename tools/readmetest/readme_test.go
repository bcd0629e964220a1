package readmetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// root is the repository root, relative to this package.
const root = "../.."

// block is one fenced Go code block of a markdown file.
type block struct {
	// line is the 1-based line of the block's first code line in the file.
	line int
	code string
	// pkg is the block's package clause: "main" for a program, else a test file.
	pkg string
	// output is what a program prints, from its "// Output" comment; nil when it has none.
	output []string
}

// parseBlocks extracts the ```go blocks of md. Each must be a whole file: it starts
// with its package clause.
func parseBlocks(md string) ([]block, error) {
	var (
		out   []block
		cur   *block
		lines []string
	)
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur = &block{line: i + 2}
			lines = nil
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.code = strings.Join(lines, "\n") + "\n"
			pkg, ok := "", false
			if len(lines) > 0 {
				pkg, ok = strings.CutPrefix(strings.TrimSpace(lines[0]), "package ")
			}
			if !ok {
				return nil, fmt.Errorf("line %d: a go block must be a whole file starting with its package clause", cur.line)
			}
			cur.pkg = pkg
			cur.output = outputOf(lines)
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			lines = append(lines, l)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: go block not closed", cur.line)
	}
	return out, nil
}

// outputOf reads the comment lines after "// Output" (the rest of that line may say
// under which conditions), as Go examples write them.
func outputOf(lines []string) []string {
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "// Output") {
			continue
		}
		out := []string{}
		for _, o := range lines[i+1:] {
			text, ok := strings.CutPrefix(strings.TrimSpace(o), "//")
			if !ok {
				break
			}
			out = append(out, strings.TrimPrefix(text, " "))
		}
		return out
	}
	return nil
}

func TestParseBlocks(t *testing.T) {
	md := "# t\n\n```go\npackage main\n\nfunc main() {\n\tprintln(1)\n\t// Output (here):\n\t// 1\n\t//   two\n}\n```\n\n```sh\nmake test\n```\n```go\npackage x_test\n```\n"
	blocks, err := parseBlocks(md)
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	assert.Equal(t, 4, blocks[0].line)
	assert.Equal(t, "main", blocks[0].pkg)
	assert.Equal(t, []string{"1", "  two"}, blocks[0].output)
	assert.Equal(t, "x_test", blocks[1].pkg)
	assert.Nil(t, blocks[1].output)

	_, err = parseBlocks("```go\nfunc f() {}\n```\n")
	assert.EqualError(t, err, "line 2: a go block must be a whole file starting with its package clause")
	_, err = parseBlocks("```go\n```\n")
	assert.EqualError(t, err, "line 2: a go block must be a whole file starting with its package clause")
	_, err = parseBlocks("text\n```go\npackage main\n")
	assert.EqualError(t, err, "line 3: go block not closed")
}

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	return string(b)
}

// pages returns README.md and every guide under docs/, by path relative to the
// repository root: the pages whose code and commands the tests check.
func pages(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"README.md": readme(t)}
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, guides, "no guides under docs/")
	for _, g := range guides {
		b, err := os.ReadFile(g)
		require.NoError(t, err)
		out[filepath.ToSlash(strings.TrimPrefix(g, root+"/"))] = string(b)
	}
	return out
}

// goTool is the go command that runs this test (go test puts it first on PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("no go command on PATH to compile the README's code (NCCLGO_STRICT is set: a missing tool fails)")
		}
		t.Skip("no go command on PATH to compile the README's code")
	}
	return p
}

// written is the pages' blocks written as packages under testdata.
type written struct {
	blocks []block
	page   []string // the page of each block
	dirs   []string // package directory of each block, relative to this package
}

// writeBlocks writes every block as its own package: main.go for programs,
// readme_test.go for test files.
func writeBlocks(t *testing.T) written {
	t.Helper()
	var w written
	all := pages(t)
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		blocks, err := parseBlocks(all[name])
		require.NoError(t, err, name)
		for _, b := range blocks {
			w.blocks = append(w.blocks, b)
			w.page = append(w.page, name)
		}
	}
	require.NotEmpty(t, w.blocks, "README.md and docs/ have no go blocks")
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	tmp, err := os.MkdirTemp("testdata", "readme-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	for i, b := range w.blocks {
		dir := filepath.Join(tmp, fmt.Sprintf("b%d", i))
		require.NoError(t, os.Mkdir(dir, 0o755))
		name := "main.go"
		if b.pkg != "main" {
			name = "readme_test.go"
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(b.code), 0o644))
		w.dirs = append(w.dirs, "./"+filepath.ToSlash(dir))
	}
	return w
}

// toReadme rewrites "…/bN/main.go:L:C" in the go command's messages as lines of the
// page the block came from.
func (w written) toReadme(msg string) string {
	re := regexp.MustCompile(`\S*/b(\d+)/(?:main|readme_test)\.go:(\d+)`)
	return re.ReplaceAllStringFunc(msg, func(m string) string {
		s := re.FindStringSubmatch(m)
		var i, l int
		fmt.Sscan(s[1], &i)
		fmt.Sscan(s[2], &l)
		if i >= len(w.blocks) {
			return m
		}
		return fmt.Sprintf("%s:%d", w.page[i], w.blocks[i].line+l-1)
	})
}

func (w written) goCmd(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(goTool(t), args...)
	cmd.Env = append(testenv.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return w.toReadme(out.String()), err
}

// cachedLibs returns the environment that points the loader at the libraries `make
// libs` caches, or nil when they are absent.
func cachedLibs() []string {
	cache := os.Getenv("NCCLGO_CACHE")
	if cache == "" {
		if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
			cache = filepath.Join(x, "ncclgo")
		} else if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "ncclgo")
		}
	}
	nccl := filepath.Join(cache, "lib", "nccl-2.29.7", "libnccl.so.2")
	cuda := filepath.Join(cache, "lib", "cuda-535.261.03", "libcuda.so.1")
	for _, p := range []string{nccl, cuda} {
		if _, err := os.Stat(p); err != nil {
			return nil
		}
	}
	return []string{"NCCLGO_LIBNCCL=" + nccl, "NCCLGO_LIBCUDA=" + cuda}
}

func TestReadmeCodeCompilesRunsAndPrintsItsOutput(t *testing.T) {
	w := writeBlocks(t)
	out, err := w.goCmd(t, nil, append([]string{"vet"}, w.dirs...)...)
	require.NoError(t, err, "README or guide code does not compile or vet:\n%s", out)

	for i, b := range w.blocks {
		name := fmt.Sprintf("%s:%d", w.page[i], b.line)
		switch {
		case b.pkg != "main":
			t.Run(name+" go test", func(t *testing.T) {
				out, err := w.goCmd(t, nil, "test", "-count=1", w.dirs[i])
				require.NoError(t, err, out)
			})
		case b.output != nil:
			t.Run(name+" go run", func(t *testing.T) {
				var env []string
				if strings.Contains(b.code, `"github.com/ncclgo/ncclgo/raw/`) {
					if env = cachedLibs(); env == nil {
						if os.Getenv("NCCLGO_STRICT") != "" {
							t.Fatalf("the cached NVIDIA libraries are absent: run make libs (NCCLGO_STRICT is set: a missing library fails)")
						}
						t.Skip("the cached NVIDIA libraries are absent: run make libs")
					}
				}
				out, err := w.goCmd(t, env, "run", w.dirs[i])
				require.NoError(t, err, out)
				assert.Equal(t, strings.Join(b.output, "\n"), strings.TrimRight(out, "\n"))
			})
		}
	}
}

func TestReadmeNamesCommandsThatExist(t *testing.T) {
	assert.Contains(t, readme(t), "make test                 # the test command", "README names make test as the test command")

	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z-]*):`).FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	made := 0
	for page, md := range pages(t) {
		for _, m := range regexp.MustCompile("(?m)(?:`|^\\s*)make ([a-z][a-z-]*)").FindAllStringSubmatch(md, -1) {
			made++
			assert.True(t, targets[m[1]], "%s runs make %s, which the Makefile does not have", page, m[1])
		}
		for _, m := range regexp.MustCompile(`go run (\./tools/[a-z]+)`).FindAllStringSubmatch(md, -1) {
			_, err := os.Stat(filepath.Join(root, m[1], "main.go"))
			assert.NoError(t, err, "%s runs %s", page, m[1])
		}
		for _, path := range regexp.MustCompile("`((?:gen|headers|tools|comm|raw|docs|kernels)/[A-Za-z0-9_./-]+)`").FindAllStringSubmatch(md, -1) {
			p := strings.TrimSuffix(path[1], "/")
			if p == "comm/raw" {
				continue // a benchmark's ratio, comm's time over raw's
			}
			if strings.Contains(p, "2.30.1") || strings.Contains(p, "2.31.1") {
				continue // the example release
			}
			_, err := os.Stat(filepath.Join(root, p))
			assert.NoError(t, err, "%s names %s", page, p)
		}
	}
	assert.Positive(t, made, "no make command in README.md or docs/")
}

// TestReadmeIsShort: README is the first screen of the project, at most 300 lines;
// everything else lives in the guides under docs/ and in the package documentation.
func TestReadmeIsShort(t *testing.T) {
	lines := strings.Count(readme(t), "\n")
	assert.LessOrEqual(t, lines, 300, "README.md has %d lines: move the depth to a guide under docs/", lines)
}

// TestLinksResolve: every relative link of README.md and the guides names a file that
// exists, and a #fragment names a heading of that file.
func TestLinksResolve(t *testing.T) {
	all := pages(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	n := 0
	for page, md := range all {
		for _, m := range link.FindAllStringSubmatch(md, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			file, frag, _ := strings.Cut(target, "#")
			resolved := page
			if file != "" {
				resolved = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				_, err := os.Stat(filepath.Join(root, resolved))
				if !assert.NoError(t, err, "%s links to %s", page, target) {
					continue
				}
			}
			if frag == "" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(root, resolved))
			require.NoError(t, err)
			assert.Contains(t, anchors(string(b)), frag, "%s links to %s: no such heading in %s", page, target, resolved)
		}
	}
	assert.Positive(t, n, "no relative links found")
}

// anchors returns the fragment GitHub makes of each heading of md: lower case, spaces
// as hyphens, punctuation other than hyphens and underscores dropped.
func anchors(md string) []string {
	var out []string
	fence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
