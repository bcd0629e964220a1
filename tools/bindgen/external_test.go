package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The proof that bindgen serves other projects: a module outside this repository, with
// a C library of its own, generates its package with `go run .../tools/bindgen`, builds
// it and calls it; nothing in the package is written by hand.

const demoHeader = `#ifndef DEMO_H
#define DEMO_H
#include <stddef.h>
#define DEMO_MAGIC 42
#define DEMO_NAME "demo"
typedef enum { demoSuccess = 0, demoInvalidArgument = 1, demoOverflow = 2 } demoResult_t;
typedef struct demoCounter_st *demoCounter_t;
typedef struct demoPoint { int x; double y; char tag[3]; } demoPoint_t;
int demoGetVersion(int *version);
const char *demoGetErrorString(demoResult_t r);
demoResult_t demoAdd(int a, int b, int *sum);
demoResult_t demoCounterCreate(demoCounter_t *c, int start);
demoResult_t demoCounterNext(demoCounter_t c, int *value);
demoResult_t demoCounterDestroy(demoCounter_t c);
demoResult_t demoScale(demoPoint_t *p, double by);
size_t demoPointSize(void);
#endif
`

const demoSource = `#include <limits.h>
#include <stdlib.h>
#include "demo.h"
int demoGetVersion(int *version) { *version = 10203; return 0; }
const char *demoGetErrorString(demoResult_t r) {
	switch (r) {
	case demoSuccess: return "no error";
	case demoInvalidArgument: return "invalid argument";
	case demoOverflow: return "integer overflow";
	}
	return NULL;
}
demoResult_t demoAdd(int a, int b, int *sum) {
	if (sum == NULL) return demoInvalidArgument;
	if ((b > 0 && a > INT_MAX - b) || (b < 0 && a < INT_MIN - b)) return demoOverflow;
	*sum = a + b;
	return demoSuccess;
}
struct demoCounter_st { int next; };
demoResult_t demoCounterCreate(demoCounter_t *c, int start) {
	*c = malloc(sizeof **c);
	(*c)->next = start;
	return demoSuccess;
}
demoResult_t demoCounterNext(demoCounter_t c, int *value) { *value = c->next++; return demoSuccess; }
demoResult_t demoCounterDestroy(demoCounter_t c) { free(c); return demoSuccess; }
demoResult_t demoScale(demoPoint_t *p, double by) { p->x = (int)(p->x * by); p->y *= by; p->tag[0] = 's'; return demoSuccess; }
size_t demoPointSize(void) { return sizeof(demoPoint_t); }
`

const demoConfig = `{
  "package": "demo",
  "out": "demo",
  "header": "demo.h",
  "result": "demoResult_t",
  "sets": ["demo-1.2.3"],
  "settings": [{"name": "default"}],
  "prefixes": ["DEMO_", "demo"],
  "headers": {"dir": "include/{set}"},
  "library": {"name": "demo", "env": "DEMO_LIBRARY", "sonames": ["libdemo.so.1"],
    "versionSymbol": "demoGetVersion", "versionFormats": [{"from": 0, "divisors": [10000, 100, 1]}]},
  "errors": {"message": ["demoGetErrorString"]}
}
`

const demoMain = `package main

import (
	"errors"
	"fmt"
	"unsafe"

	"example.com/demoapp/demo"
)

func main() {
	var sum int32
	fmt.Println("add:", demo.Add(40, 2, &sum), sum)
	err := demo.Add(2147483647, 1, &sum)
	fmt.Println("overflow:", err, errors.Is(err, demo.Overflow))
	v, err := demo.LoadedVersion()
	fmt.Println("version:", v, demo.FormatVersion(v), err)
	var c demo.Counter
	fmt.Println("create:", demo.CounterCreate(&c, 7))
	for i := 0; i < 3; i++ {
		var n int32
		_ = demo.CounterNext(c, &n)
		fmt.Print(n, " ")
	}
	fmt.Println()
	fmt.Println("destroy:", demo.CounterDestroy(c))
	p := demo.Point{X: 3, Y: 1.5}
	fmt.Println("scale:", demo.Scale(&p, 2), p.X, p.Y, string(rune(p.Tag[0])))
	size, err := demo.PointSize()
	fmt.Println("size:", size, unsafe.Sizeof(p), err)
	fmt.Println("consts:", demo.Magic, demo.Name)
	cov, err := demo.Coverage()
	fmt.Println("coverage:", len(cov), err)
}
`

const demoWant = `add: <nil> 42
overflow: demo: integer overflow true
version: 10203 1.2.3 <nil>
create: <nil>
7 8 9 
destroy: <nil>
scale: <nil> 6 3 s
size: 24 24 <nil>
consts: 42 demo
coverage: 8 <nil>
`

func TestGeneratedPackageWorksInAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	for _, tool := range []string{"gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("NCCLGO_STRICT") != "" {
				t.Fatalf("%s is not on PATH (apt-get install gcc)", tool)
			}
			t.Skipf("%s is not on PATH (apt-get install gcc)", tool)
		}
	}
	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	// go test puts the go command that runs it first on PATH.
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	mod := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(mod, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	write("go.mod", extGoMod("example.com/demoapp", repo))
	write("include/demo-1.2.3/demo.h", demoHeader)
	write("csrc/demo.c", demoSource)
	write("gen/demo.json", demoConfig)
	write("cmd/demo/main.go", demoMain)
	lib := filepath.Join(mod, "lib", "libdemo.so.1")
	require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-I", filepath.Join(mod, "include", "demo-1.2.3"),
		"-Wl,-soname,libdemo.so.1", "-o", lib, filepath.Join(mod, "csrc", "demo.c")).CombinedOutput()
	require.NoError(t, err, "gcc: %s", out)

	env := append(os.Environ(), "GOFLAGS=-mod=mod", "DEMO_LIBRARY="+lib, "CGO_ENABLED=1")
	goCmd := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = mod
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	gen := goCmd("run", "github.com/ncclgo/ncclgo/tools/bindgen", "generate", "gen/demo.json")
	require.Contains(t, gen, "bindgen: demo from demo.h (demo-1.2.3, settings default)")
	for _, f := range []string{"zload.go", "zerrors.go", "zfuncs_cgo.go", "ztypes.go", "zsymbols.go"} {
		require.FileExists(t, filepath.Join(mod, "demo", f))
	}
	require.FileExists(t, filepath.Join(mod, "gen", "snapshot", "demo-1.2.3.api.json"))
	require.Equal(t, demoWant, goCmd("run", "./cmd/demo"))
	// The generated layout test compiles the header with gcc and compares every layout.
	require.Contains(t, goCmd("test", "-count=1", "-v", "-run", "TestLayoutMatchesGCC", "./demo/"), "--- PASS: TestLayoutMatchesGCC")
	// Without cgo the package still builds (types and constants), calls say cgo is needed.
	cmd := exec.Command(goBin, "vet", "./...")
	cmd.Dir, cmd.Env = mod, append(env, "CGO_ENABLED=0")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go vet: %s", out)
}
