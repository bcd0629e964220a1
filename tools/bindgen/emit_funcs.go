package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/dave/jennifer/jen"
)

// argKind is how one parameter crosses from Go to C.
type argKind int

const (
	argNumber  argKind = iota // C.<scalar>(x)
	argHandle                 // C.uintptr_t(x)
	argPointer                // unsafe.Pointer(x)
	argValue                  // *(*C.T)(unsafe.Pointer(&x)): a struct or union by value
)

// resultKind is what a function returns in Go.
type resultKind int

const (
	resError   resultKind = iota // the library's result type: returned as error
	resNone                      // void
	resString                    // const char *: string
	resNumber                    // a number or handle: (T, error)
	resPointer                   // a pointer: (T, error)
	resValue                     // a struct or union by value: (T, error), copied from C's bytes
)

// crossing is the Go <-> C plan of one function.
type crossing struct {
	f       *Func
	params  []jen.Code // Go parameters
	args    []jen.Code // Go arguments of the trampoline call (after fp)
	res     resultKind
	resType *jen.Statement
	tramp   string // C trampoline definition
	// unchecked are the Go names of the parameters passed without cgo's pointer check,
	// and sentinels the pointer macros they may take.
	unchecked []string
	sentinels []*sentinel
	name      string // trampoline name
	doc       string
}

func (g *goPkg) argOf(t *CType) (argKind, string, error) {
	if g.isHandle(t) {
		return argHandle, "uintptr_t", nil
	}
	r := g.resolve(t)
	switch r.Kind {
	case Pointer:
		return argPointer, "void *", nil
	case Scalar:
		return argNumber, r.Name, nil
	case Named: // system typedef
		return argNumber, r.Name, nil
	case Enum:
		if d := g.lookup(r); d != nil {
			return argNumber, enumInt(d), nil
		}
		return argNumber, "int", nil
	case Struct, Union:
		return argValue, "", nil
	}
	return 0, "", fmt.Errorf("cannot pass %s", cType(t))
}

// typedPointee returns the pointee of a pointer parameter that the trampoline takes as
// a typed pointer (a scalar or a typedef name), or nil for one it takes as void *.
func typedPointee(t *CType) *CType {
	if t.Kind != Pointer {
		return nil
	}
	switch el := t.Elem; el.Kind {
	case Scalar, Named:
		return el
	}
	return nil
}

// cgoName spells a C scalar or system typedef for cgo (C.uint, C.size_t).
func cgoName(c string) string {
	if s, ok := cgoScalar[c]; ok {
		return s
	}
	return c
}

func (g *goPkg) plan(f *Func, sents map[string]*sentinel) (*crossing, error) {
	cr := &crossing{f: f, name: g.cfg.CPrefix + "tramp_" + f.Symbol}
	var swaps strings.Builder // the sentinels' swaps, before the call
	var tparams, targs []string
	tparams = append(tparams, "uintptr_t fp")
	used := map[string]bool{}
	for i, p := range f.Sig.Params {
		gt, err := g.goType(p.Type)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", p.Name, err)
		}
		name := paramGoName(p.Name, i)
		if used[name] {
			name += itoa(i)
		}
		used[name] = true
		cr.params = append(cr.params, jen.Id(name).Add(gt))
		kind, ctyp, err := g.argOf(p.Type)
		if err != nil {
			return nil, fmt.Errorf("parameter %s: %w", p.Name, err)
		}
		a := fmt.Sprintf("a%d", i)
		castTo := g.mirrorDecl(unconst(p.Type), "")
		switch kind {
		case argNumber:
			cr.args = append(cr.args, jen.Qual("C", cgoName(ctyp)).Call(jen.Id(name)))
			tparams = append(tparams, ctyp+" "+a)
			targs = append(targs, "("+castTo+")"+a)
		case argHandle:
			cr.args = append(cr.args, jen.Qual("C", "uintptr_t").Call(jen.Id(name)))
			tparams = append(tparams, "uintptr_t "+a)
			targs = append(targs, "("+castTo+")"+a)
		case argPointer:
			if el := typedPointee(p.Type); el != nil {
				// A typed pointer: cgo checks a void * argument for Go pointers on every
				// call, but not a pointer to a type that cannot hold any.
				cr.args = append(cr.args, jen.Parens(jen.Op("*").Qual("C", cgoTypeName(cgoName(cBase(el))))).Call(
					jen.Qual("unsafe", "Pointer").Call(jen.Id(name))))
				tparams = append(tparams, g.mirrorDecl(&CType{Kind: Pointer, Elem: unconst(el)}, a))
			} else if u := g.cfg.unchecked(f.Symbol, p.Name); u != nil {
				// A data buffer (uncheckedPointers): the same pointer, typed so that cgo
				// does not check it (see unchecked.go for why that is sound).
				cr.args = append(cr.args, jen.Parens(jen.Op("*").Qual("C", "char")).Call(
					jen.Qual("unsafe", "Pointer").Call(jen.Id(name))))
				tparams = append(tparams, "char *"+a)
				cr.unchecked = append(cr.unchecked, name)
				for _, m := range u.Sentinels {
					st := sents[m]
					// The address standing for the sentinel becomes its value here, in C:
					// Go never holds that value in a pointer.
					fmt.Fprintf(&swaps, "\tif (%s == (char *)%s()) %s = (char *)(uintptr_t)0x%x;\n", a, st.cFunc, a, st.c.Uint)
					if !slices.Contains(cr.sentinels, st) {
						cr.sentinels = append(cr.sentinels, st)
					}
				}
			} else {
				cr.args = append(cr.args, jen.Qual("unsafe", "Pointer").Call(jen.Id(name)))
				tparams = append(tparams, "void *"+a)
			}
			targs = append(targs, "("+castTo+")"+a)
		case argValue:
			ctype := castTo
			cr.args = append(cr.args, jen.Op("*").Parens(jen.Op("*").Qual("C", cgoTypeName(ctype))).Parens(
				jen.Qual("unsafe", "Pointer").Call(jen.Op("&").Id(name))))
			tparams = append(tparams, ctype+" "+a)
			targs = append(targs, a)
		}
	}
	// Result.
	rt := f.Sig.Result
	var tret string
	switch {
	case rt.Kind == Void:
		cr.res, tret = resNone, "void"
	case (rt.Kind == Named || rt.Kind == Scalar) && rt.Name == g.cfg.Result:
		cr.res = resError
		kind, ctyp, err := g.argOf(rt)
		if err != nil || kind != argNumber {
			return nil, fmt.Errorf("result type %s is not an integer", rt.Name)
		}
		tret = ctyp
	case rt.Kind == Pointer && rt.Elem.Kind == Scalar && rt.Elem.Name == "char":
		cr.res, tret = resString, "const char *"
		cr.resType = jen.String()
	default:
		kind, ctyp, err := g.argOf(rt)
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		gt, err := g.goType(rt)
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		cr.resType = gt
		switch kind {
		case argNumber:
			cr.res, tret = resNumber, ctyp
		case argHandle:
			cr.res, tret = resNumber, "uintptr_t"
		case argPointer:
			cr.res, tret = resPointer, "void *"
		default:
			cr.res, tret = resValue, g.mirrorDecl(unconst(rt), "")
		}
	}
	fnType := g.mirrorDecl(&CType{Kind: Pointer, Elem: &CType{Kind: FuncPtr, Sig: unnamed(f.Sig)}}, "")
	call := fmt.Sprintf("((%s)fp)(%s)", fnType, strings.Join(targs, ", "))
	body := "return (" + tret + ")" + call + ";"
	if tret == "void" {
		body = call + ";"
	}
	cr.tramp = fmt.Sprintf("static %s %s(%s) {\n%s\t%s\n}\n", tret, cr.name, strings.Join(tparams, ", "), swaps.String(), body)
	cr.doc = g.funcDoc(f)
	if n := len(cr.unchecked); n > 0 {
		what := cr.unchecked[0] + " is"
		if n > 1 {
			what = strings.Join(cr.unchecked[:n-1], ", ") + " and " + cr.unchecked[n-1] + " are"
		}
		cr.doc += "\n\n" + what + " passed without cgo's pointer check: never pass Go memory that holds Go pointers."
		for _, st := range cr.sentinels {
			cr.doc += fmt.Sprintf(" Where %s takes %s, pass %s.", g.api.Header, st.c.Name, st.goVar)
		}
	}
	return cr, nil
}

// cgoTypeName turns a mirror type spelling into the cgo name (struct X -> struct_X).
func cgoTypeName(c string) string {
	return strings.NewReplacer("struct ", "struct_", "union ", "union_").Replace(c)
}

func unconst(t *CType) *CType {
	c := *t
	c.Const = false
	return &c
}

func unnamed(s *Signature) *Signature {
	c := *s
	c.Params = nil
	for _, p := range s.Params {
		c.Params = append(c.Params, Param{Type: p.Type})
	}
	return &c
}

// mirrorDecl spells a type with the mirror's names (enums as integers, generated tags).
func (g *goPkg) mirrorDecl(t *CType, name string) string { return newMirror(g).decl(t, name) }

func (g *goPkg) funcDoc(f *Func) string {
	var b strings.Builder
	if f.Public != f.Symbol {
		fmt.Fprintf(&b, "%s calls %s (spelled %s in %s):\n\n", f.GoName, f.Symbol, f.Public, g.api.Header)
	} else {
		fmt.Fprintf(&b, "%s calls %s:\n\n", f.GoName, f.Symbol)
	}
	fmt.Fprintf(&b, "\t%s\n", cSignature(f.Symbol, f.Sig))
	if len(g.cfg.Settings) > 1 {
		fmt.Fprintf(&b, "\nDeclared in the settings: %s.", strings.Join(f.Settings, ", "))
	}
	if f.Since != "" {
		fmt.Fprintf(&b, "\nFirst pinned header declaring it: %s.", f.Since)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (g *goPkg) results(cr *crossing) []jen.Code {
	switch cr.res {
	case resError, resNone:
		return []jen.Code{jen.Error()}
	}
	return []jen.Code{jen.Id("r").Add(cr.resType), jen.Id("err").Error()}
}

func symVar(sym string) string { return "_sym_" + sym }

// emitFuncs writes the cgo and the !cgo files.
func (g *goPkg) emitFuncs() (cgoFile, nocgoFile *jen.File, err error) {
	sents, err := g.sentinels()
	if err != nil {
		return nil, nil, err
	}
	var crs []*crossing
	for _, f := range g.api.Funcs {
		cr, err := g.plan(f, sents)
		if err != nil {
			return nil, nil, fmt.Errorf("function %s (%s): %w", f.Symbol, f.Pos, err)
		}
		crs = append(crs, cr)
	}
	if err := g.cfg.unusedUnchecked(); err != nil {
		return nil, nil, err
	}
	// Preamble: mirror declarations, then trampolines.
	m := newMirror(g)
	for _, f := range g.api.Funcs {
		for _, p := range f.Sig.Params {
			if err := m.need(p.Type, true); err != nil {
				return nil, nil, fmt.Errorf("function %s: %w", f.Symbol, err)
			}
		}
		if err := m.need(f.Sig.Result, true); err != nil {
			return nil, nil, fmt.Errorf("function %s: %w", f.Symbol, err)
		}
	}
	var pre strings.Builder
	pre.WriteString("#include <stddef.h>\n#include <stdint.h>\n\n")
	pre.WriteString("// Declarations mirroring the header (not available at build time).\n")
	pre.WriteString(m.out.String())
	if len(sents) > 0 {
		pre.WriteString("\n// The addresses standing for pointer sentinels (uncheckedPointers).\n")
		for _, n := range sentinelNames(sents) {
			fmt.Fprintf(&pre, "static void *%s(void) { static char at; return &at; }\n", sents[n].cFunc)
		}
	}
	pre.WriteString("\n// One trampoline per function: call the resolved address with the C signature.\n")
	done := map[string]bool{}
	for _, cr := range crs {
		if done[cr.name] {
			continue
		}
		done[cr.name] = true
		fmt.Fprintf(&pre, "#cgo noescape %s\n#cgo nocallback %s\n", cr.name, cr.name)
		pre.WriteString(cr.tramp)
	}

	cgoFile = jen.NewFile(g.cfg.Package)
	cgoFile.HeaderComment("//go:build cgo")
	g.header(cgoFile)
	cgoFile.CgoPreamble(pre.String())
	nocgoFile = jen.NewFile(g.cfg.Package)
	nocgoFile.HeaderComment("//go:build !cgo")
	g.header(nocgoFile)
	for _, n := range sentinelNames(sents) {
		st := sents[n]
		doc := fmt.Sprintf("%s stands for %s (%s) in the buffer parameters that take it: the generated functions pass %s to C in its place. It is the address of a byte of C memory, so that Go never holds %s's value in a pointer.", st.goVar, st.c.Name, st.c.GoName, st.c.Name, st.c.Name)
		comment(cgoFile, doc)
		cgoFile.Var().Id(st.goVar).Op("=").Qual("unsafe", "Pointer").Call(jen.Qual("C", st.cFunc).Call())
		comment(nocgoFile, doc)
		nocgoFile.Var().Id(st.goVar).Op("=").Qual("unsafe", "Pointer").Call(jen.New(jen.Byte()))
	}

	for _, cr := range crs {
		f := cr.f
		call := jen.Qual("C", cr.name).Call(append([]jen.Code{jen.Qual("C", "uintptr_t").Call(jen.Id("fp"))}, cr.args...)...)
		resolve := []jen.Code{
			jen.List(jen.Id("fp"), jen.Id("err")).Op(":=").Id("lib").Dot("Resolve").Call(jen.Op("&").Id(symVar(f.Symbol))),
		}
		var body []jen.Code
		var stub jen.Code
		switch cr.res {
		case resError:
			resName := g.goTypeName(f.Sig.Result)
			if f.Sig.Result.Kind == Scalar {
				resName = g.cfg.ResultType
			}
			body = append(resolve,
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
				jen.Return(jen.Id("resultError").Call(jen.Id(resName).Call(call))))
			stub = jen.Return(jen.Qual(dlPath, "ErrNeedsCgo"))
		case resNone:
			body = append(resolve,
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Err())),
				call,
				jen.Return(jen.Nil()))
			stub = jen.Return(jen.Qual(dlPath, "ErrNeedsCgo"))
		case resString:
			body = append(resolve,
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("r"), jen.Err())),
				jen.Return(jen.Qual("C", "GoString").Call(call), jen.Nil()))
			stub = jen.Return(jen.Id("r"), jen.Qual(dlPath, "ErrNeedsCgo"))
		case resNumber, resPointer:
			conv := jen.Add(cr.resType).Call(call)
			if cr.res == resPointer {
				conv = jen.Parens(cr.resType).Call(call)
			}
			body = append(resolve,
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("r"), jen.Err())),
				jen.Return(conv, jen.Nil()))
			stub = jen.Return(jen.Id("r"), jen.Qual(dlPath, "ErrNeedsCgo"))
		case resValue:
			// The Go type has the C layout (the layout test checks it): copy C's bytes.
			body = append(resolve,
				jen.If(jen.Err().Op("!=").Nil()).Block(jen.Return(jen.Id("r"), jen.Err())),
				jen.Id("c").Op(":=").Add(call),
				jen.Return(jen.Op("*").Parens(jen.Op("*").Add(cr.resType)).Parens(jen.Qual("unsafe", "Pointer").Call(jen.Op("&").Id("c"))), jen.Nil()))
			stub = jen.Return(jen.Id("r"), jen.Qual(dlPath, "ErrNeedsCgo"))
		}
		for _, out := range []*jen.File{cgoFile, nocgoFile} {
			comment(out, cr.doc)
			fn := out.Func().Id(f.GoName).Params(cr.params...)
			res := g.results(cr)
			if len(res) == 1 {
				fn.Add(res[0])
			} else {
				fn.Params(res...)
			}
			if out == cgoFile {
				fn.Block(body...)
			} else {
				fn.Block(stub)
			}
		}
	}
	return cgoFile, nocgoFile, nil
}

// emitSymbols writes zsymbols.go: one dl.Symbol per called symbol, and the list of all.
func (g *goPkg) emitSymbols() *jen.File {
	f := jen.NewFile(g.cfg.Package)
	g.header(f)
	syms := map[string]string{}
	for _, fn := range g.api.Funcs {
		syms[fn.Symbol] = fn.Since
	}
	names := make([]string, 0, len(syms))
	for s := range syms {
		names = append(names, s)
	}
	sort.Strings(names)
	var defs, list []jen.Code
	for _, s := range names {
		defs = append(defs, jen.Id(symVar(s)).Op("=").Qual(dlPath, "Symbol").Values(
			jen.Id("Name").Op(":").Lit(s), jen.Id("Since").Op(":").Lit(syms[s])))
		list = append(list, jen.Op("&").Id(symVar(s)))
	}
	f.Comment("The symbols the functions call, each with the first pinned header version declaring it.")
	f.Var().Defs(defs...)
	f.Comment("symbols lists every symbol above, sorted by name.")
	f.Var().Id("symbols").Op("=").Index().Op("*").Qual(dlPath, "Symbol").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, list...)
	return f
}
