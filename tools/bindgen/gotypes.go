package main

import (
	"fmt"

	"github.com/dave/jennifer/jen"
	"sort"
	"strings"
)

// The C -> Go type mapping, applied mechanically:
//
//	char, signed char, unsigned char -> byte, int8, uint8
//	short, int, long, long long (and unsigned) -> int16, int32, int64, int64 (uint16 ...)
//	size_t, uint64_t, ... -> uint64, uint64, ... (size_t is uint64 on every 64-bit target)
//	float, double -> float32, float64
//	enum -> a named int32 (uint32 when a value needs it)
//	typedef of a pointer to an incomplete struct (a handle) -> a named uintptr
//	function pointer -> uintptr (typedef'd: a named uintptr)
//	void * -> unsafe.Pointer; char * and const char * -> *byte; T * -> *T
//	T[N] -> [N]T
//	struct -> struct with the same field offsets; union -> byte storage of the union's
//	size and alignment with one accessor method per member
//	typedef of a typedef -> a Go alias (type A = B)

var scalarGo = map[string]string{
	"_Bool": "bool", "char": "byte", "signed char": "int8", "unsigned char": "uint8",
	"short": "int16", "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32",
	"long": "int64", "unsigned long": "uint64", "long long": "int64", "unsigned long long": "uint64",
	"float": "float32", "double": "float64",
}

// cgoScalar is how cgo spells a C scalar type (C.uint for unsigned int).
var cgoScalar = map[string]string{
	"_Bool": "_Bool", "char": "char", "signed char": "schar", "unsigned char": "uchar",
	"short": "short", "unsigned short": "ushort", "int": "int", "unsigned int": "uint",
	"long": "long", "unsigned long": "ulong", "long long": "longlong", "unsigned long long": "ulonglong",
	"float": "float", "double": "double",
}

// goPkg is one package being generated: the API of its target set with Go names.
type goPkg struct {
	cfg    *Config
	api    *API
	byKey  map[string]*TypeDecl // declKey -> decl
	goName map[*TypeDecl]string // Go type name of each emitted declaration
	absorb map[*TypeDecl]bool   // typedefs that only name an aggregate (emitted as the aggregate)
	names  map[string]string    // Go name -> what declares it, for collisions
	errs   []error

	optionalHeader bool     // the target set's source is one of headers.optionalSources
	headerSource   string   // the target set's source in the manifest
	setExtra       []string // the target's extra headers that are the set's own (not our preludes)

	snaps []map[string]*entity // the snapshots of cfg.Sets, oldest first (emit_tables.go)
}

func declKey(d *TypeDecl) string {
	if d.Kind != DeclTypedef && !d.Anonymous {
		return d.CSpell
	}
	return d.CName
}

// lookup finds the declaration a CType names (nil for system typedefs and incomplete structs).
func (g *goPkg) lookup(t *CType) *TypeDecl {
	switch t.Kind {
	case Named:
		return g.byKey[t.Name]
	case Struct:
		if d := g.byKey["struct "+t.Name]; d != nil {
			return d
		}
	case Union:
		if d := g.byKey["union "+t.Name]; d != nil {
			return d
		}
	case Enum:
		if d := g.byKey["enum "+t.Name]; d != nil {
			return d
		}
	default:
		return nil
	}
	// An anonymous aggregate is keyed by its generated name; a typedef of the same name
	// (typedef struct opBox opBox;) is not the aggregate.
	if d := g.byKey[t.Name]; d != nil && d.Kind != DeclTypedef {
		return d
	}
	return nil
}

func newGoPkg(cfg *Config, api *API) (*goPkg, error) {
	g := &goPkg{cfg: cfg, api: api, byKey: map[string]*TypeDecl{}, goName: map[*TypeDecl]string{},
		absorb: map[*TypeDecl]bool{}, names: map[string]string{}}
	all := append(append([]*TypeDecl{}, api.External...), api.Types...)
	for _, d := range all {
		g.byKey[declKey(d)] = d
	}
	// Typedefs that name a tagged aggregate give it their Go name (the first one does).
	for _, d := range all {
		if d.Kind != DeclTypedef {
			continue
		}
		u := d.Underlying
		if u.Kind == Struct || u.Kind == Union || u.Kind == Enum {
			if agg := g.lookup(u); agg != nil && g.goName[agg] == "" {
				g.goName[agg] = cfg.goName(d.CName)
				g.absorb[d] = true
			}
		}
	}
	// Everything else, parents before the anonymous aggregates nested in them.
	var name func(d *TypeDecl) string
	name = func(d *TypeDecl) string {
		if n := g.goName[d]; n != "" {
			return n
		}
		var n string
		switch {
		case cfg.renamed(d.CName) != "":
			n = cfg.renamed(d.CName)
		case d.Kind == DeclTypedef:
			n = goName(d.CName, cfg.Prefixes)
		case d.ParentDecl != nil && d.FieldName != "":
			n = name(d.ParentDecl) + camel(d.FieldName)
		case d.ParentDecl != nil:
			n = name(d.ParentDecl) + "Anon" + d.CName[strings.LastIndex(d.CName, ".")+1:]
		case d.Anonymous:
			n = cfg.goName(d.CName)
		default:
			n = tagGoName(d.CName, cfg.Prefixes)
		}
		g.goName[d] = n
		return n
	}
	for _, d := range all {
		if !g.absorb[d] {
			name(d)
		}
	}
	for _, d := range all {
		if g.absorb[d] {
			continue
		}
		g.claim(g.goName[d], "type "+d.CName+" ("+d.Pos+")")
	}
	for _, e := range api.Enums {
		e.GoName = cfg.goName(e.Name)
		g.claim(e.GoName, "enumerator "+e.Name+" ("+e.Pos+")")
	}
	for _, c := range api.Consts {
		c.GoName = cfg.goName(c.Name)
		g.claim(c.GoName, "macro "+c.Name+" ("+c.Pos+")")
	}
	g.claimGlobals()
	for _, f := range api.Funcs {
		g.claim(f.GoName, "function "+f.Symbol+" ("+f.Pos+")")
	}
	for _, d := range all {
		if d.Kind == DeclStruct || d.Kind == DeclUnion {
			seen := map[string]string{}
			for i, f := range d.Fields {
				f.GoName = g.fieldGoName(f, i)
				if o, ok := seen[f.GoName]; ok {
					g.errs = append(g.errs, fmt.Errorf("%s: fields %s and %s both become %s", d.Pos, o, f.Name, f.GoName))
				}
				seen[f.GoName] = f.Name
			}
		}
	}
	for _, n := range g.reserved() {
		g.claim(n, "the generated run-time support (zload.go, zerrors.go)")
	}
	if len(g.errs) > 0 {
		return nil, joinErrors(g.errs)
	}
	return g, nil
}

func (g *goPkg) fieldGoName(f *FieldDecl, i int) string {
	if f.Name == "" {
		return g.goTypeName(f.Type) // embedded: the field is named by its type
	}
	n := camel(f.Name)
	if !validGoName(n) {
		n = "F" + n
	}
	return n
}

func (g *goPkg) claim(name, what string) {
	if !validGoName(name) {
		g.errs = append(g.errs, fmt.Errorf("%s: Go name %q is not an exported identifier", what, name))
		return
	}
	if old, ok := g.names[name]; ok {
		g.errs = append(g.errs, fmt.Errorf("name collision in Go: %s and %s both become %s", old, what, name))
		return
	}
	g.names[name] = what
}

// goTypeName is the Go type name a CType refers to directly (named types only).
func (g *goPkg) goTypeName(t *CType) string {
	if d := g.lookup(t); d != nil {
		if g.absorb[d] {
			return g.goName[g.lookup(d.Underlying)]
		}
		return g.goName[d]
	}
	return ""
}

// resolve follows typedef names to the type they stand for. System typedefs stay Named.
func (g *goPkg) resolve(t *CType) *CType {
	for i := 0; i < 64 && t.Kind == Named; i++ {
		d := g.lookup(t)
		if d == nil {
			return t
		}
		switch d.Kind {
		case DeclTypedef:
			t = d.Underlying
		case DeclStruct:
			return &CType{Kind: Struct, Name: d.CName, Size: d.Size, Align: d.Align}
		case DeclUnion:
			return &CType{Kind: Union, Name: d.CName, Size: d.Size, Align: d.Align}
		case DeclEnum:
			return &CType{Kind: Enum, Name: d.CName, Size: d.Size, Align: d.Align}
		}
	}
	return t
}

// isHandle reports whether a type is passed as a uintptr: a pointer to an incomplete
// struct behind a typedef, a pointer to an opaque typedef, or a function pointer.
func (g *goPkg) isHandle(t *CType) bool {
	if t.Kind == Pointer && g.isOpaque(t.Elem) {
		return true
	}
	if t.Kind == Named {
		if d := g.lookup(t); d != nil && d.Kind == DeclTypedef && !d.Alias {
			if d.Handle || d.Underlying.Kind == Pointer && g.isOpaque(d.Underlying.Elem) {
				return true
			}
			return d.Underlying.Kind == Pointer && d.Underlying.Elem.Kind == FuncPtr
		}
		if d := g.lookup(t); d != nil && d.Kind == DeclTypedef && d.Alias {
			return g.isHandle(d.Underlying)
		}
		return false
	}
	return t.Kind == Pointer && (t.Elem.Kind == FuncPtr || g.isFuncTypedef(t.Elem))
}

// goType is the Go type of a C type.
func (g *goPkg) goType(t *CType) (*jen.Statement, error) {
	switch t.Kind {
	case Scalar:
		if s, ok := scalarGo[t.Name]; ok {
			return jen.Id(s), nil
		}
		return nil, fmt.Errorf("no Go type for C %s", t.Name)
	case Named:
		if n := g.goTypeName(t); n != "" {
			return jen.Id(n), nil
		}
		if s := systemTypedefs[t.Name]; s != "" {
			return jen.Id(s), nil
		}
		return nil, fmt.Errorf("unknown typedef %s", t.Name)
	case Struct, Union, Enum:
		if n := g.goTypeName(t); n != "" {
			return jen.Id(n), nil
		}
		return nil, fmt.Errorf("%s has no definition", cBase(t))
	case Array:
		el, err := g.goType(t.Elem)
		if err != nil {
			return nil, err
		}
		return jen.Index(jen.Lit(int(t.Len))).Add(el), nil
	case FuncPtr:
		return jen.Id("uintptr"), nil
	case Pointer:
		el := t.Elem
		switch {
		case el.Kind == Void:
			return jen.Qual("unsafe", "Pointer"), nil
		case g.isOpaque(el): // opCtx_t * where typedef struct opCtx opCtx_t: the handle (opaque.go)
			return jen.Id(g.goTypeName(el)), nil
		case el.Kind == FuncPtr:
			return jen.Id("uintptr"), nil
		case g.isFuncTypedef(el): // F * where typedef R F(...): the function address, as F
			return jen.Id(g.goTypeName(el)), nil
		case el.Kind == Scalar && (el.Name == "char" || el.Name == "signed char" || el.Name == "unsigned char"):
			return jen.Op("*").Id("byte"), nil
		case el.Kind == Struct && g.lookup(el) == nil:
			return jen.Qual("unsafe", "Pointer"), nil // pointer to an incomplete struct, not behind a typedef
		}
		s, err := g.goType(el)
		if err != nil {
			return nil, err
		}
		return jen.Op("*").Add(s), nil
	}
	return nil, fmt.Errorf("no Go type for C %s", cType(t))
}

// sortedDecls returns the declarations to emit in a stable order.
func (g *goPkg) sortedDecls() []*TypeDecl {
	all := append(append([]*TypeDecl{}, g.api.External...), g.api.Types...)
	var out []*TypeDecl
	for _, d := range all {
		if !g.absorb[d] {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return g.goName[out[i]] < g.goName[out[j]] })
	return out
}
