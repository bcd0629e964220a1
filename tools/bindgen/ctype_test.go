package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCDeclPrintsTypesAsCWritesThem(t *testing.T) {
	scalar := func(n string) *CType { return &CType{Kind: Scalar, Name: n} }
	named := func(n string) *CType { return &CType{Kind: Named, Name: n} }
	ptr := func(e *CType) *CType { return &CType{Kind: Pointer, Elem: e} }
	cnst := func(t *CType) *CType { c := *t; c.Const = true; return &c }
	fn := &CType{Kind: FuncPtr, Sig: &Signature{Result: &CType{Kind: Void, Name: "void"},
		Params: []Param{{Name: "userData", Type: ptr(&CType{Kind: Void, Name: "void"})}}}}
	tests := []struct {
		name string
		t    *CType
		decl string
		want string
	}{
		{"int", scalar("int"), "n", "int n"},
		{"const char pointer", ptr(cnst(scalar("char"))), "name", "const char *name"},
		{"const pointer to char", cnst(ptr(scalar("char"))), "p", "char *const p"},
		{"pointer to pointer to void", ptr(ptr(&CType{Kind: Void, Name: "void"})), "ptr", "void **ptr"},
		{"const typedef pointee", ptr(cnst(named("ncclUniqueId"))), "uniqueId", "const ncclUniqueId *uniqueId"},
		{"const handle", cnst(named("ncclComm_t")), "comm", "const ncclComm_t comm"},
		{"char array", &CType{Kind: Array, Len: 128, Elem: scalar("char")}, "internal", "char internal[128]"},
		{"pointer to array", ptr(&CType{Kind: Array, Len: 4, Elem: scalar("int")}), "p", "int (*p)[4]"},
		{"function pointer", ptr(fn), "cb", "void (*cb)(void *userData)"},
		{"abstract pointer", ptr(cnst(&CType{Kind: Void, Name: "void"})), "", "const void *"},
		{"struct tag", ptr(&CType{Kind: Struct, Name: "CUctx_st"}), "", "struct CUctx_st *"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, cDecl(tt.t, tt.decl))
		})
	}
}

func TestCSignatureSpellsVoidParameterLists(t *testing.T) {
	sig := &Signature{Result: &CType{Kind: Named, Name: "ncclResult_t"}}
	assert.Equal(t, "ncclResult_t ncclGroupStart(void)", cSignature("ncclGroupStart", sig))
	sig.Params = []Param{{Name: "version", Type: &CType{Kind: Pointer, Elem: &CType{Kind: Scalar, Name: "int"}}}}
	assert.Equal(t, "ncclResult_t ncclGetVersion(int *version)", cSignature("ncclGetVersion", sig))
	assert.Equal(t, "ncclResult_t ncclGetVersion(int *)", cSignature("ncclGetVersion", unnamed(sig)))
}
