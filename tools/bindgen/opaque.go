package main

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// Opaque structs: `typedef struct opCtx opCtx_t;` (or `typedef struct opCtx opCtx;`) with
// no definition of struct opCtx anywhere in the header. C code only ever holds
// `opCtx_t *`, so the Go type named after the typedef is that pointer, a named uintptr
// (a handle, like the typedef of a pointer to an incomplete struct, ncclComm_t):
// `opCtx_t *` is Ctx, `opCtx_t **` is *Ctx, and the cgo preamble mirrors the typedef with
// a forward declaration of the struct.

// opaqueTypedef reports whether d is a typedef of a struct or union the header declares
// without its members.
func (g *goPkg) opaqueTypedef(d *TypeDecl) bool {
	if d == nil || d.Kind != DeclTypedef || d.Alias {
		return false
	}
	u := d.Underlying
	return (u.Kind == Struct || u.Kind == Union) && g.lookup(u) == nil
}

// isOpaque reports whether t names an opaque typedef, directly or through aliases.
func (g *goPkg) isOpaque(t *CType) bool {
	for i := 0; i < 64 && t.Kind == Named; i++ {
		d := g.lookup(t)
		if d == nil || d.Kind != DeclTypedef {
			return false
		}
		if !d.Alias {
			return g.opaqueTypedef(d)
		}
		t = d.Underlying
	}
	return false
}

// emitOpaque declares the Go handle type of an opaque typedef.
func (g *goPkg) emitOpaque(f *jen.File, d *TypeDecl, name string) {
	f.Comment(fmt.Sprintf("%s is %s *, a pointer to %s (%s): an opaque handle, since the header declares the %s without its members.",
		name, d.CName, d.CName, g.cDoc(d), declKindWord(d.Underlying)))
	f.Type().Id(name).Id("uintptr")
}

// declKindWord is "struct" or "union".
func declKindWord(t *CType) string {
	if t.Kind == Union {
		return "union"
	}
	return "struct"
}
