package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Opaque structs: C declares a struct without its members and hands out pointers to it.
// Both spellings of the typedef, one with a name of its own and one named as the tag.
const opaqueHeader = `#ifndef OP_H
#define OP_H
typedef struct opCtx opCtx_t;
typedef struct opBox opBox;
typedef opCtx_t opCtxAlias_t;
typedef opCtx_t *opHandle_t;
typedef enum { opSuccess = 0, opInvalid = 1 } opResult_t;
typedef struct { opCtx_t *ctx; int uses; } opRef_t;
opResult_t opCreate(opCtx_t **ctx, int start);
opResult_t opNext(opCtx_t *ctx, int *value);
opResult_t opRefOf(opCtxAlias_t *ctx, opRef_t *ref);
opResult_t opUses(opHandle_t h, int *uses);
opResult_t opDestroy(opCtx_t *ctx);
opBox *opBoxNew(int v);
int opBoxGet(const opBox *b);
void opBoxFree(opBox *b);
#endif
`

const opaqueSource = `#include <stdlib.h>
#include "op.h"
struct opCtx { int next; int uses; };
struct opBox { int v; };
opResult_t opCreate(opCtx_t **ctx, int start) {
	if (ctx == NULL) return opInvalid;
	*ctx = calloc(1, sizeof **ctx);
	(*ctx)->next = start;
	return opSuccess;
}
opResult_t opNext(opCtx_t *ctx, int *value) {
	if (ctx == NULL) return opInvalid;
	ctx->uses++;
	*value = ctx->next++;
	return opSuccess;
}
opResult_t opRefOf(opCtxAlias_t *ctx, opRef_t *ref) { ref->ctx = ctx; ref->uses = ctx->uses; return opSuccess; }
opResult_t opUses(opHandle_t h, int *uses) { *uses = h->uses; return opSuccess; }
opResult_t opDestroy(opCtx_t *ctx) { free(ctx); return opSuccess; }
opBox *opBoxNew(int v) { opBox *b = malloc(sizeof *b); b->v = v; return b; }
int opBoxGet(const opBox *b) { return b->v; }
void opBoxFree(opBox *b) { free(b); }
`

const opaqueConfig = `{
  "package": "op",
  "out": "op",
  "header": "op.h",
  "result": "opResult_t",
  "sets": ["op-1.0.0"],
  "settings": [{"name": "default"}],
  "prefixes": ["OP_", "op"],
  "headers": {"dir": "include/{set}"},
  "library": {"name": "op", "env": "OP_LIBRARY", "sonames": ["libop.so.1"]},
  "errors": {}
}
`

const opaqueMain = `package main

import (
	"fmt"

	"example.com/opapp/op"
)

func main() {
	var c op.Ctx
	fmt.Println("create:", op.Create(&c, 7), c != 0)
	for i := 0; i < 3; i++ {
		var n int32
		_ = op.Next(c, &n)
		fmt.Print(n, " ")
	}
	fmt.Println()
	var ref op.Ref
	fmt.Println("ref:", op.RefOf(op.CtxAlias(c), &ref), ref.Ctx == c, ref.Uses)
	var uses int32
	fmt.Println("uses:", op.Uses(op.Handle(c), &uses), uses)
	fmt.Println("null:", op.Next(0, nil))
	fmt.Println("destroy:", op.Destroy(c))
	b, err := op.BoxNew(42)
	fmt.Println("box:", b != 0, err)
	v, err := op.BoxGet(b)
	fmt.Println("get:", v, err)
	fmt.Println("free:", op.BoxFree(b))
}
`

const opaqueWant = `create: <nil> true
7 8 9 
ref: <nil> true 3
uses: <nil> 3
null: op: opResult_t 1
destroy: <nil>
box: true <nil>
get: 42 <nil>
free: <nil>
`

// TestOpaqueStructsBuildWithAndWithoutCgo generates a package from a header whose
// structs are declared without members (typedef struct opCtx opCtx_t; typedef struct
// opBox opBox;), builds it with cgo and without, and calls the library through the
// handles: a pointer to an opaque struct becomes a named uintptr, as a typedef'd pointer
// to an incomplete struct (ncclComm_t) does.
func TestOpaqueStructsBuildWithAndWithoutCgo(t *testing.T) {
	m := newExtModule(t)
	m.write("go.mod", extGoMod("example.com/opapp", m.repo))
	m.write("include/op-1.0.0/op.h", opaqueHeader)
	m.write("gen/op.json", opaqueConfig)
	m.write("cmd/op/main.go", opaqueMain)
	lib := m.library("libop.so.1", opaqueSource, "include/op-1.0.0")
	env := []string{"GOFLAGS=-mod=mod", "OP_LIBRARY=" + lib, "CGO_ENABLED=1"}
	gen := m.goCmd(env, "run", "github.com/ncclgo/ncclgo/tools/bindgen", "generate", "gen/op.json")
	require.Contains(t, gen, "bindgen: op from op.h (op-1.0.0, settings default)")
	types, err := os.ReadFile(filepath.Join(m.dir, "op", "ztypes.go"))
	require.NoError(t, err)
	assert.Contains(t, string(types), "type Ctx uintptr")
	assert.Contains(t, string(types), "type Box uintptr")
	assert.Contains(t, string(types), "type CtxAlias = Ctx")
	assert.Contains(t, string(types), "type Handle Ctx")
	snap, err := os.ReadFile(filepath.Join(m.dir, "gen", "snapshot", "op-1.0.0.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(snap), "type opCtx_t: typedef struct opCtx opCtx_t\n")
	assert.Contains(t, string(snap), "type opBox: typedef struct opBox opBox\n")

	require.Equal(t, opaqueWant, m.goCmd(env, "run", "./cmd/op"))
	require.Contains(t, m.goCmd(env, "test", "-count=1", "-v", "-run", "TestLayoutMatchesGCC", "./op/"), "--- PASS: TestLayoutMatchesGCC")
	m.goCmd(append(env, "CGO_ENABLED=0"), "vet", "./...")
	out, err := m.run(append(env, "CGO_ENABLED=0"), "go", "run", "./cmd/op")
	require.NoError(t, err, "CGO_ENABLED=0 go run: %s", out)
	assert.Contains(t, out, "create: calling into a shared library needs cgo")
}
