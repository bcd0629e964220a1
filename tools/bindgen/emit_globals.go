package main

import (
	"fmt"

	"github.com/dave/jennifer/jen"
)

// claimGlobals names the global-address macros (see parse_globals.go).
func (g *goPkg) claimGlobals() {
	for _, a := range g.api.Globals {
		a.GoName = g.cfg.goName(a.Name)
		g.claim(a.GoName, "macro "+a.Name+" ("+a.Pos+")")
	}
}

func globalSymVar(sym string) string { return "_global_" + sym }

// emitGlobals writes zglobals.go: one dl.Symbol per addressed global and one accessor
// per macro, which resolves the global in the loaded library (dlsym gives the address
// the macro stands for) and returns it as the macro's type. It is nil when the header has
// no such macro. The accessors need no cgo of their own: without cgo, Resolve returns
// ErrNeedsCgo.
func (g *goPkg) emitGlobals() (*jen.File, error) {
	if len(g.api.Globals) == 0 {
		return nil, nil
	}
	f := jen.NewFile(g.cfg.Package)
	g.header(f)
	seen := map[string]bool{}
	var defs []jen.Code
	for _, a := range g.api.Globals {
		if seen[a.Global] {
			continue
		}
		seen[a.Global] = true
		defs = append(defs, jen.Id(globalSymVar(a.Global)).Op("=").Qual(dlPath, "Symbol").Values(
			jen.Id("Name").Op(":").Lit(a.Global), jen.Id("Since").Op(":").Lit(g.cfg.setVersion(g.api.Set))))
	}
	f.Comment("The library globals whose addresses the macros below stand for.")
	f.Var().Defs(defs...)
	for _, a := range g.api.Globals {
		typ := jen.Id("uintptr")
		if a.Type != "" {
			t := &CType{Kind: Named, Name: a.Type}
			n := g.goTypeName(t)
			if n == "" {
				return nil, fmt.Errorf("macro %s (%s): type %s is not declared", a.Name, a.Pos, a.Type)
			}
			if d := g.lookup(t); d == nil || !g.isHandle(t) {
				return nil, fmt.Errorf("macro %s (%s): %s is not a handle type (a typedef of a pointer to an incomplete struct)", a.Name, a.Pos, a.Type)
			}
			typ = jen.Id(n)
		}
		f.Comment(fmt.Sprintf("%s is %s, the address of the library global %s as %s (%s),", a.GoName, a.Name, a.Global, a.Type, globalText(a)))
		f.Comment("resolved in the loaded library on first use. The error is the load or symbol error.")
		f.Func().Id(a.GoName).Params().Params(jen.Add(typ), jen.Error()).Block(
			jen.List(jen.Id("p"), jen.Err()).Op(":=").Id("lib").Dot("Resolve").Call(jen.Op("&").Id(globalSymVar(a.Global))),
			jen.Return(jen.Add(typ).Call(jen.Id("p")), jen.Err()),
		)
	}
	var syms []jen.Code
	seen = map[string]bool{}
	for _, a := range g.api.Globals {
		if !seen[a.Global] {
			seen[a.Global] = true
			syms = append(syms, jen.Op("&").Id(globalSymVar(a.Global)))
		}
	}
	f.Comment("globalSymbols lists every global above, sorted by macro name.")
	f.Var().Id("globalSymbols").Op("=").Index().Op("*").Qual(dlPath, "Symbol").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, syms...)
	return f, nil
}

// globalsDoc is the package documentation's paragraph on the global-address accessors
// ("" when there are none).
func (g *goPkg) globalsDoc() string {
	if len(g.api.Globals) == 0 {
		return ""
	}
	var a *GlobalAddr // the shortest typed one, as the example
	for _, x := range g.api.Globals {
		if x.Type != "" && (a == nil || len(x.Name) < len(a.Name)) {
			a = x
		}
	}
	if a == nil {
		a = g.api.Globals[0]
	}
	return fmt.Sprintf("\n\n# Handles that are addresses of library globals\n\n"+
		"A macro of the header whose value is the address of an object the library exports, cast\n"+
		"to a handle type (%s is %s), is a function returning that address: it looks the object\n"+
		"up with dlsym in the loaded library on first use (%s() (%s, error)), so nothing is\n"+
		"linked at build time. Its error is the load or symbol error.\n\n"+
		"A typedef of a function type (typedef int F(void *)), used as F *, is a named uintptr\n"+
		"holding the address of such a C function.", a.Name, globalText(a), a.GoName, g.goTypeName(&CType{Kind: Named, Name: a.Type}))
}
