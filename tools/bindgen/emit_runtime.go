package main

import (
	"fmt"
	"strings"

	"github.com/dave/jennifer/jen"
)

// The two files that bind a generated package to its library at run time, both from the
// config, so a generated package needs nothing written by hand: zload.go (the dl.Library
// and the functions about it) and zerrors.go (how a result becomes an error).

// reserved are the Go names zload.go and zerrors.go declare; the header must not use them.
func (g *goPkg) reserved() []string {
	var n []string
	if g.cfg.Library != nil {
		n = append(n, "ErrLibraryNotFound", "ErrSymbolNotFound", "ErrNeedsCgo", "ErrAlreadyLoaded",
			"SymbolError", "LoadError", "LoadInfo", "Attempt", "SymbolStatus",
			"SetLibraryPath", "LibraryInfo", "LoadedVersion", "Coverage", "Load")
		if len(g.cfg.Library.VersionFormats) > 0 {
			n = append(n, "FormatVersion")
		}
	}
	if e := g.cfg.Errors; e != nil && e.Detail != "" {
		n = append(n, "Error")
	}
	if g.cfg.Errors != nil && g.scalarResult() {
		n = append(n, g.cfg.ResultType)
	}
	return n
}

func strs(l []string) jen.Code {
	var c []jen.Code
	for _, s := range l {
		c = append(c, jen.Lit(s))
	}
	return jen.Index().String().Values(c...)
}

// emitLoad writes zload.go.
func (g *goPkg) emitLoad() *jen.File {
	l := g.cfg.Library
	f := jen.NewFile(g.cfg.Package)
	g.header(f)
	fields := []jen.Code{
		jen.Id("Name").Op(":").Lit(l.Name),
		jen.Id("Header").Op(":").Lit(g.cfg.Header),
	}
	if l.Driver {
		fields = append(fields, jen.Id("Driver").Op(":").True())
	}
	if l.Env != "" {
		fields = append(fields, jen.Id("Env").Op(":").Lit(l.Env))
	}
	fields = append(fields, jen.Id("Sonames").Op(":").Add(strs(l.Sonames)))
	if len(l.WheelDirs) > 0 {
		fields = append(fields, jen.Id("WheelDirs").Op(":").Add(strs(l.WheelDirs)))
	}
	if len(l.HomeEnvs) > 0 {
		fields = append(fields, jen.Id("HomeEnvs").Op(":").Add(strs(l.HomeEnvs)))
	}
	if l.VersionSymbol != "" {
		fields = append(fields, jen.Id("VersionSymbol").Op(":").Lit(l.VersionSymbol))
	}
	if len(l.VersionFormats) > 0 {
		vn := l.VersionName
		if vn == "" {
			vn = l.Name
		}
		fields = append(fields, jen.Id("FormatVersion").Op(":").Func().Params(jen.Id("code").Int()).String().Block(
			jen.Return(jen.Lit(vn+" ").Op("+").Id("FormatVersion").Call(jen.Id("code")))))
	}
	doc := fmt.Sprintf("lib is the %s library (%s), opened on first use. The generated functions resolve their symbols in it", l.Name, strings.Join(l.Sonames, ", "))
	if len(g.api.Globals) > 0 {
		doc += ", and the global-address accessors the library globals"
	}
	doc += "."
	if l.Doc != "" {
		doc += "\n\n" + l.Doc
	}
	comment(f, wrap(doc, 90))
	f.Var().Id("lib").Op("=").Op("&").Qual(dlPath, "Library").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, fields...)

	search := []string{}
	if l.Env != "" {
		search = append(search, "$"+l.Env)
	}
	search = append(search, "the sonames ("+strings.Join(l.Sonames, ", ")+")")
	if len(l.WheelDirs) > 0 {
		search = append(search, "Python wheels ("+strings.Join(l.WheelDirs, ", ")+")")
	}
	for _, h := range l.HomeEnvs {
		search = append(search, "$"+h)
	}
	name := l.Name
	f.Comment(fmt.Sprintf("Errors of loading the %s library and resolving its functions; see package dl.", name))
	f.Var().Defs(
		jen.Comment(fmt.Sprintf("ErrLibraryNotFound is matched by the error of every call when no %s library could be", name)).Line().
			Comment("loaded; the error is a *LoadError listing each file tried and the loader's message.").Line().
			Comment("It is this library's own value (it matches dl.ErrLibraryNotFound; no other library's error matches it).").Line().
			Id("ErrLibraryNotFound").Op("=").Id("lib").Dot("NotFound").Call(),
		jen.Comment("ErrSymbolNotFound is matched by a *SymbolError: the loaded library is older than the").Line().
			Comment("function.").Line().
			Id("ErrSymbolNotFound").Op("=").Qual(dlPath, "ErrSymbolNotFound"),
		jen.Comment("ErrNeedsCgo is returned by every call of a binary built with CGO_ENABLED=0.").Line().
			Id("ErrNeedsCgo").Op("=").Qual(dlPath, "ErrNeedsCgo"),
		jen.Comment("ErrAlreadyLoaded is matched by the error of SetLibraryPath after first use.").Line().
			Id("ErrAlreadyLoaded").Op("=").Qual(dlPath, "ErrAlreadyLoaded"),
	)
	alias := func(n, doc string) {
		comment(f, doc)
		f.Type().Id(n).Op("=").Qual(dlPath, n)
	}
	alias("SymbolError", fmt.Sprintf("SymbolError is the error of a function the loaded %s library does not export: it names\nthe function, the file, the library's version and the first pinned %s declaring it.", name, g.cfg.Header))
	alias("LoadError", fmt.Sprintf("LoadError is the error of a %s library that could not be loaded: every file tried, with\nthe loader's message.", name))
	alias("LoadInfo", fmt.Sprintf("LoadInfo describes which %s library was loaded, how it was found and what was tried.", name))
	alias("Attempt", fmt.Sprintf("Attempt is one file tried while looking for the %s library.", name))
	alias("SymbolStatus", "SymbolStatus says whether the loaded library exports one function of this package.")

	comment(f, wrap(fmt.Sprintf("SetLibraryPath makes path the %s library to load, ahead of the search (%s). "+
		"Call it before the first call into the library; afterwards it returns an error matching ErrAlreadyLoaded.",
		name, strings.Join(search, ", ")), 90))
	f.Func().Id("SetLibraryPath").Params(jen.Id("path").String()).Error().Block(jen.Return(jen.Id("lib").Dot("SetPath").Call(jen.Id("path"))))
	comment(f, fmt.Sprintf("LibraryInfo loads the %s library if that was not tried yet and tells which file was\nloaded, why, its version, and every file tried before it.", name))
	f.Func().Id("LibraryInfo").Params().Id("LoadInfo").Block(jen.Return(jen.Id("lib").Dot("Info").Call()))
	if l.VersionSymbol != "" {
		ex := ""
		if l.VersionExample != 0 && len(l.VersionFormats) > 0 {
			ex = fmt.Sprintf(" (%d for %s %s)", l.VersionExample, name, formatVersion(l.VersionFormats, l.VersionExample))
		}
		comment(f, fmt.Sprintf("LoadedVersion loads the %s library if needed and returns its version code, as %s\ngives it%s.", name, l.VersionSymbol, ex))
		f.Func().Id("LoadedVersion").Params().Params(jen.Int(), jen.Error()).Block(jen.Return(jen.Id("lib").Dot("Version").Call()))
	}
	if len(l.VersionFormats) > 0 {
		ex := ""
		if l.VersionExample != 0 {
			ex = fmt.Sprintf(": %d -> %q", l.VersionExample, formatVersion(l.VersionFormats, l.VersionExample))
		}
		comment(f, fmt.Sprintf("FormatVersion writes a %s version code as text%s.", name, ex))
		var body []jen.Code
		for i, vf := range l.VersionFormats {
			args := []jen.Code{jen.Id("code")}
			for _, d := range vf.Divisors {
				args = append(args, jen.Lit(d))
			}
			ret := jen.Return(jen.Qual(dlPath, "FormatVersion").Call(args...))
			if i == len(l.VersionFormats)-1 && vf.From == 0 {
				body = append(body, ret)
			} else {
				body = append(body, jen.If(jen.Id("code").Op(">=").Lit(vf.From)).Block(ret))
			}
		}
		if last := l.VersionFormats[len(l.VersionFormats)-1]; last.From != 0 {
			body = append(body, jen.Return(jen.Qual("strconv", "Itoa").Call(jen.Id("code"))))
		}
		f.Func().Id("FormatVersion").Params(jen.Id("code").Int()).String().Block(body...)
	}
	comment(f, fmt.Sprintf("Load opens the %s library if that was not tried yet and returns the load error, if any.", name))
	f.Func().Id("Load").Params().Error().Block(jen.Return(jen.Id("lib").Dot("Load").Call()))
	syms := jen.Id("symbols")
	what := "function"
	if len(g.api.Globals) > 0 {
		syms = jen.Append(jen.Append(jen.Index().Op("*").Qual(dlPath, "Symbol").Values(), jen.Id("symbols").Op("...")), jen.Id("globalSymbols").Op("..."))
		what = "function and every global"
	}
	comment(f, wrap(fmt.Sprintf("Coverage loads the library if needed and reports, for every %s of this package, "+
		"whether the loaded library exports it, with the first pinned header version that declares it. "+
		"The error is the load error when no library could be loaded.", what), 90))
	f.Func().Id("Coverage").Params().Params(jen.Index().Id("SymbolStatus"), jen.Error()).Block(jen.Return(jen.Id("lib").Dot("Coverage").Call(syms)))
	return f
}

// commentLines is text as one // comment per line, then a new line.
func commentLines(text string) *jen.Statement {
	s := jen.Null()
	for _, l := range strings.Split(text, "\n") {
		s.Comment(l).Line()
	}
	return s
}

// formatVersion is dl.FormatVersion under the config's rules, for doc comments.
func formatVersion(fs []VersionFormat, code int) string {
	for _, f := range fs {
		if code >= f.From {
			parts := make([]string, len(f.Divisors))
			for i, d := range f.Divisors {
				p := code / d
				if i > 0 {
					p %= f.Divisors[i-1] / d
				}
				parts[i] = fmt.Sprint(p)
			}
			return strings.Join(parts, ".")
		}
	}
	return fmt.Sprint(code)
}

// funcByName finds a function by its header spelling or its symbol.
func (g *goPkg) funcByName(name string) *Func {
	for _, f := range g.api.Funcs {
		if f.Public == name || f.Symbol == name {
			return f
		}
	}
	return nil
}

func isCharPtr(t *CType) bool {
	return t != nil && t.Kind == Pointer && t.Elem.Kind == Scalar && t.Elem.Name == "char"
}

// scalarResult reports whether the result type is a C scalar (MPI's int error codes),
// whose Go type (resultType) the package declares itself or zerrors.go declares.
func (g *goPkg) scalarResult() bool { return scalarGo[g.cfg.Result] != "" }

// emitErrors writes zerrors.go.
func (g *goPkg) emitErrors() (*jen.File, error) {
	e := g.cfg.Errors
	res := g.goTypeName(&CType{Kind: Named, Name: g.cfg.Result})
	// rArg is r as the functions' parameter of the result type.
	rArg := func() *jen.Statement { return jen.Id("r") }
	if g.scalarResult() {
		res = g.cfg.ResultType
		rArg = func() *jen.Statement { return jen.Id(scalarGo[g.cfg.Result]).Call(jen.Id("r")) }
	}
	if res == "" {
		return nil, fmt.Errorf("errors: result type %s is not a type of the header: write resultError by hand and leave errors out", g.cfg.Result)
	}
	isRes := func(t *CType) bool {
		if g.scalarResult() {
			return t != nil && t.Kind == Scalar && t.Name == g.cfg.Result
		}
		return g.goTypeName(t) == res
	}
	success := ""
	for _, v := range g.api.Enums {
		if (e.Success != "" && v.Name == e.Success) || (e.Success == "" && v.Enum == g.cfg.Result && v.Value == 0) {
			success = v.GoName
			break
		}
	}
	if success == "" && e.Success != "" {
		for _, c := range g.api.Consts {
			if c.Name == e.Success && (c.Kind == ConstInt || c.Kind == ConstUint) {
				success = c.GoName
			}
		}
	}
	if success == "" {
		return nil, fmt.Errorf("errors: no success enumerator of %s (set errors.success)", g.cfg.Result)
	}
	buffer := ""
	if e.Buffer != "" {
		for _, c := range g.api.Consts {
			if c.Name == e.Buffer && (c.Kind == ConstInt || c.Kind == ConstUint) {
				buffer = c.GoName
			}
		}
		if buffer == "" {
			return nil, fmt.Errorf("errors: buffer %s is not an integer macro of the header", e.Buffer)
		}
	}
	number := e.Number
	if number == "" {
		number = g.cfg.Result
	}
	pkg := g.cfg.Package
	f := jen.NewFile(pkg)
	g.header(f)
	if g.scalarResult() {
		doc := e.Doc
		if doc == "" {
			doc = fmt.Sprintf("%s is what a function returns (%s in %s): %s or another code. It is an error.", res, g.cfg.Result, g.cfg.Header, success)
		}
		comment(f, wrap(doc, 90))
		f.Type().Id(res).Id(scalarGo[g.cfg.Result])
	}
	var describe []jen.Code
	var used []string
	for _, name := range e.Message {
		fn := g.funcByName(name)
		if fn == nil {
			return nil, fmt.Errorf("errors: message function %s is not in the header", name)
		}
		used = append(used, fn.Symbol)
		s := fn.Sig
		switch {
		case isCharPtr(s.Result) && len(s.Params) == 1 && isRes(s.Params[0].Type):
			describe = append(describe, jen.If(jen.List(jen.Id("s"), jen.Err()).Op(":=").Id(fn.GoName).Call(rArg()),
				jen.Err().Op("==").Nil().Op("&&").Id("s").Op("!=").Lit("")).Block(
				jen.Id("parts").Op("=").Append(jen.Id("parts"), jen.Id("s"))))
		case isRes(s.Result) && len(s.Params) == 2 && isRes(s.Params[0].Type) &&
			s.Params[1].Type.Kind == Pointer && isCharPtr(s.Params[1].Type.Elem):
			describe = append(describe, jen.Block(
				jen.Var().Id("p").Op("*").Byte(),
				jen.If(jen.Id(fn.GoName).Call(rArg(), jen.Op("&").Id("p")).Op("==").Nil().Op("&&").Id("p").Op("!=").Nil()).Block(
					jen.Id("parts").Op("=").Append(jen.Id("parts"), jen.Qual(dlPath, "GoString").Call(jen.Id("p"))))))
		case buffer != "" && isRes(s.Result) && len(s.Params) == 3 && isRes(s.Params[0].Type) && isCharPtr(s.Params[1].Type) &&
			s.Params[2].Type.Kind == Pointer && s.Params[2].Type.Elem.Kind == Scalar && s.Params[2].Type.Elem.Name == "int":
			// R f(R code, char *buf, int *len): the text in a buffer of the config's size.
			describe = append(describe, jen.Block(
				jen.Var().Id("buf").Index(jen.Id(buffer)).Byte(),
				jen.Var().Id("n").Int32(),
				jen.If(jen.Id(fn.GoName).Call(rArg(), jen.Op("&").Id("buf").Index(jen.Lit(0)), jen.Op("&").Id("n")).Op("==").Nil().
					Op("&&").Id("n").Op(">").Lit(0).Op("&&").Int().Call(jen.Id("n")).Op("<=").Len(jen.Id("buf"))).Block(
					jen.Id("parts").Op("=").Append(jen.Id("parts"), jen.String().Call(jen.Id("buf").Index(jen.Empty(), jen.Id("n")))))))
		default:
			return nil, fmt.Errorf("errors: message function %s must be const char *f(%s), %s f(%s, const char **) or, with errors.buffer, %s f(%s, char *, int *)", name, g.cfg.Result, g.cfg.Result, g.cfg.Result, g.cfg.Result, g.cfg.Result)
		}
	}
	doc := fmt.Sprintf("Error makes a %s an error. ", res)
	if len(used) > 0 {
		doc += fmt.Sprintf("Its message is the library's own (%s) when the library is loaded, else the number: %q.", strings.Join(used, ", "), pkg+": "+number+" 1")
	} else {
		doc += fmt.Sprintf("Its message is the number: %q.", pkg+": "+number+" 1")
	}
	comment(f, wrap(doc, 90))
	var body []jen.Code
	if len(describe) > 0 {
		body = append(body, jen.If(jen.Id("lib").Dot("Loaded").Call()).Block(append(append([]jen.Code{jen.Var().Id("parts").Index().String()}, describe...),
			jen.If(jen.Len(jen.Id("parts")).Op(">").Lit(0)).Block(
				jen.Return(jen.Lit(pkg+": ").Op("+").Qual("strings", "Join").Call(jen.Id("parts"), jen.Lit(": ")))))...))
	}
	body = append(body, jen.Return(jen.Lit(pkg+": "+number+" ").Op("+").Qual("strconv", "Itoa").Call(jen.Int().Call(jen.Id("r")))))
	f.Func().Params(jen.Id("r").Id(res)).Id("Error").Params().String().Block(body...)

	if e.Detail == "" {
		comment(f, fmt.Sprintf("resultError turns what a function returned into an error: nil for %s, else the %s\nitself, so errors.Is and errors.As work on it. The success path allocates nothing.", success, res))
		f.Func().Id("resultError").Params(jen.Id("r").Id(res)).Error().Block(
			jen.If(jen.Id("r").Op("==").Id(success)).Block(jen.Return(jen.Nil())),
			jen.Return(jen.Id("r")))
		return f, nil
	}
	fn := g.funcByName(e.Detail)
	if fn == nil {
		return nil, fmt.Errorf("errors: detail function %s is not in the header", e.Detail)
	}
	if !isCharPtr(fn.Sig.Result) || len(fn.Sig.Params) != 1 {
		return nil, fmt.Errorf("errors: detail function %s must be const char *f(H)", e.Detail)
	}
	zero := jen.Lit(0)
	if pt := g.resolve(fn.Sig.Params[0].Type); pt.Kind == Pointer && !g.isHandle(fn.Sig.Params[0].Type) {
		zero = jen.Nil()
	}
	var skip []string
	cond := jen.Id("lib").Dot("Loaded").Call()
	for _, n := range e.NoDetail {
		found := ""
		for _, v := range g.api.Enums {
			if v.Name == n {
				found = v.GoName
			}
		}
		if found == "" {
			return nil, fmt.Errorf("errors: noDetail %s is not an enumerator", n)
		}
		skip = append(skip, found)
		cond = jen.Id("r").Op("!=").Id(found).Op("&&").Add(cond)
	}
	comment(f, wrap(fmt.Sprintf("Error is the error of a call that did not return %s: the %s and the text of %s "+
		"taken right after the failure. It unwraps to its %s, so errors.Is and errors.As work with the %s values.", success, res, fn.Symbol, res, res), 90))
	detailDoc := fmt.Sprintf("Detail is %s at the time of the failure: the library's own account of what went wrong. Empty when it had nothing to say", fn.Symbol)
	if len(skip) > 0 {
		detailDoc += " or the result is " + strings.Join(skip, " or ")
	}
	f.Type().Id("Error").Struct(
		jen.Comment("Result is what the call returned.").Line().Id("Result").Id(res),
		commentLines(wrap(detailDoc+".", 86)).Id("Detail").String(),
	)
	f.Comment("Error is the Result's message followed by the detail.")
	f.Func().Params(jen.Id("e").Op("*").Id("Error")).Id("Error").Params().String().Block(
		jen.If(jen.Id("e").Dot("Detail").Op("==").Lit("")).Block(jen.Return(jen.Id("e").Dot("Result").Dot("Error").Call())),
		jen.Return(jen.Id("e").Dot("Result").Dot("Error").Call().Op("+").Lit(": ").Op("+").Id("e").Dot("Detail")))
	f.Comment("Unwrap returns the Result.")
	f.Func().Params(jen.Id("e").Op("*").Id("Error")).Id("Unwrap").Params().Error().Block(jen.Return(jen.Id("e").Dot("Result")))
	comment(f, fmt.Sprintf("resultError turns what a function returned into an error: nil for %s, else an *Error\ncarrying %s's text. The success path allocates nothing.", success, fn.Symbol))
	f.Func().Id("resultError").Params(jen.Id("r").Id(res)).Error().Block(
		jen.If(jen.Id("r").Op("==").Id(success)).Block(jen.Return(jen.Nil())),
		jen.Return(jen.Id("newError").Call(jen.Id("r"))))
	comment(f, fmt.Sprintf("newError captures %s's text for r.", fn.Symbol))
	f.Func().Id("newError").Params(jen.Id("r").Id(res)).Error().Block(
		jen.Id("e").Op(":=").Op("&").Id("Error").Values(jen.Id("Result").Op(":").Id("r")),
		jen.If(cond).Block(
			jen.If(jen.List(jen.Id("s"), jen.Err()).Op(":=").Id(fn.GoName).Call(zero), jen.Err().Op("==").Nil()).Block(
				jen.Id("e").Dot("Detail").Op("=").Id("s"))),
		jen.Return(jen.Id("e")))
	return f, nil
}
