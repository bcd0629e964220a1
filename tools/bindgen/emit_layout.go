package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dave/jennifer/jen"
)

// The generated layout test compiles a C program against the real header with gcc. The
// program prints one line per check, "<key> <a> <b>": for a type its size and alignment,
// for a field its offset and size, for a constant its value. The test compares the lines
// with the same figures taken from the Go declarations with package unsafe.

type layoutCheck struct {
	key    string
	cA, cB string   // C expressions
	goA    jen.Code // Go expressions (uint64)
	goB    jen.Code
	before string // Go statement declaring the value the expressions use
}

func (g *goPkg) layoutChecks() []layoutCheck {
	var out []layoutCheck
	for _, d := range g.sortedDecls() {
		if d.ParentDecl != nil || (d.Kind == DeclTypedef && (d.Alias || isAggregate(d.Underlying) || d.Underlying.Kind == FuncPtr)) {
			continue // checked through its parent / the same as another type
		}
		cname := d.CName
		if d.Kind != DeclTypedef && !d.Anonymous {
			cname = d.CSpell
		}
		v := "v" + g.goName[d]
		goAlign := jen.Uint64().Call(jen.Qual("unsafe", "Alignof").Call(jen.Id(v)))
		if d.Align > maxGoAlign {
			// Go aligns nothing beyond 8 bytes: check size and offsets, and that gcc
			// agrees with the alignment the type's documentation states.
			goAlign = jen.Lit(int(d.Align))
		}
		out = append(out, layoutCheck{
			key: cname,
			cA:  "sizeof(" + cname + ")", cB: "_Alignof(" + cname + ")",
			goA:    jen.Uint64().Call(jen.Qual("unsafe", "Sizeof").Call(jen.Id(v))),
			goB:    goAlign,
			before: fmt.Sprintf("var %s %s", v, g.goName[d]),
		})
		if d.Kind == DeclStruct || d.Kind == DeclUnion {
			out = append(out, g.fieldChecks(d, cname, "", v, v)...)
		}
	}
	for _, e := range g.api.Enums {
		out = append(out, layoutCheck{key: e.Name, cA: "(long long)(" + e.Name + ")", cB: "0",
			goA: jen.Id("u64").Call(jen.Int64().Call(jen.Id(e.GoName))), goB: jen.Lit(0)})
	}
	for _, c := range g.api.Consts {
		switch c.Kind {
		case ConstInt:
			out = append(out, layoutCheck{key: c.Name, cA: "(long long)(" + c.Name + ")", cB: "0",
				goA: jen.Id("u64").Call(jen.Int64().Call(jen.Id(c.GoName))), goB: jen.Lit(0)})
		case ConstUint:
			out = append(out, layoutCheck{key: c.Name, cA: "(unsigned long long)(" + c.Name + ")", cB: "0",
				goA: jen.Uint64().Call(jen.Id(c.GoName)), goB: jen.Lit(0)})
		case ConstPointer:
			out = append(out, layoutCheck{key: c.Name, cA: "(unsigned long long)(uintptr_t)(" + c.Name + ")", cB: "0",
				goA: jen.Uint64().Call(jen.Id(c.GoName)), goB: jen.Lit(0)})
		}
	}
	return out
}

func isAggregate(t *CType) bool { return t.Kind == Struct || t.Kind == Union || t.Kind == Enum }

// fieldChecks lists the fields of d, descending into anonymous nested aggregates. cpath is
// the C member path so far, expr the Go expression of the value holding the fields.
func (g *goPkg) fieldChecks(d *TypeDecl, cname, cpath, base, expr string) []layoutCheck {
	var out []layoutCheck
	for _, f := range d.Fields {
		// e is the field's value, addr its address: a union member's accessor already
		// returns the pointer, so its address is the call itself (never &*p).
		var e, addr string
		if d.Kind == DeclUnion {
			addr = fmt.Sprintf("%s.%s()", expr, f.GoName)
			e = "(*" + addr + ")"
		} else {
			e = expr + "." + f.GoName
			addr = "&" + e
		}
		p := cpath
		if f.Name != "" {
			if p != "" {
				p += "."
			}
			p += f.Name
			out = append(out, layoutCheck{
				key: cname + "." + p,
				cA:  fmt.Sprintf("offsetof(%s, %s)", cname, p),
				cB:  fmt.Sprintf("sizeof(((%s *)0)->%s)", cname, p),
				goA: jen.Uint64().Call(jen.Uintptr().Call(jen.Qual("unsafe", "Pointer").Call(jen.Id(addr))).Op("-").
					Uintptr().Call(jen.Qual("unsafe", "Pointer").Call(jen.Op("&").Id(base)))),
				goB: jen.Uint64().Call(jen.Qual("unsafe", "Sizeof").Call(jen.Id(e))),
			})
		}
		if nd := g.lookup(f.Type); nd != nil && nd.ParentDecl != nil && (nd.Kind == DeclStruct || nd.Kind == DeclUnion) {
			out = append(out, g.fieldChecks(nd, cname, p, base, e)...)
		}
	}
	return out
}

// emitLayoutTest writes zlayout_test.go.
func (g *goPkg) emitLayoutTest() (*jen.File, error) {
	checks := g.layoutChecks()
	var prog strings.Builder
	prog.WriteString("#include <stddef.h>\n#include <stdint.h>\n#include <stdio.h>\n")
	fmt.Fprintf(&prog, "#include <%s>\n", g.api.Header)
	for _, h := range g.api.Extra {
		fmt.Fprintf(&prog, "#include <%s>\n", h)
	}
	prog.WriteString("\nint main(void) {\n")
	for _, c := range checks {
		fmt.Fprintf(&prog, "\tprintf(\"%%s\\t%%llu\\t%%llu\\n\", %q, (unsigned long long)(%s), (unsigned long long)(%s));\n",
			c.key, c.cA, c.cB)
	}
	prog.WriteString("\treturn 0;\n}\n")

	var defines []jen.Code
	for _, st := range g.cfg.Settings {
		for _, d := range st.Defines {
			defines = append(defines, jen.Lit("-D"+d))
		}
	}
	var includes []jen.Code
	for _, inc := range g.cfg.Include {
		rel, err := filepath.Rel(g.cfg.Out, inc)
		if err != nil {
			return nil, err
		}
		includes = append(includes, jen.Lit(filepath.ToSlash(rel)))
	}

	f := jen.NewFile(g.cfg.Package)
	g.header(f)
	f.Comment("layoutProgram prints the layout gcc gives every type and field and the value of every constant.")
	if strings.Contains(prog.String(), "`") {
		return nil, fmt.Errorf("layout program contains a backquote")
	}
	f.Const().Id("layoutProgram").Op("=").Op("`" + prog.String() + "`")

	var stmts []jen.Code
	seen := map[string]bool{}
	for _, c := range checks {
		if c.before != "" && !seen[c.before] {
			seen[c.before] = true
			stmts = append(stmts, jen.Op(c.before))
		}
	}
	var entries []jen.Code
	for _, c := range checks {
		entries = append(entries, jen.Values(jen.Lit(c.key), c.goA, c.goB))
	}
	stmts = append(stmts, jen.Return(jen.Index().Id("layoutEntry").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, entries...)))
	f.Comment("layoutEntry is one line of the layout program's output.")
	f.Type().Id("layoutEntry").Struct(jen.Id("key").String(), jen.List(jen.Id("a"), jen.Id("b")).Uint64())
	f.Comment("u64 converts a signed value the way the C program prints it.")
	f.Func().Id("u64").Params(jen.Id("v").Int64()).Uint64().Block(jen.Return(jen.Uint64().Call(jen.Id("v"))))
	f.Comment("goLayout is the same figures taken from the Go declarations.")
	f.Func().Id("goLayout").Params().Index().Id("layoutEntry").Block(stmts...)

	req := "github.com/stretchr/testify/require"
	g.emitHeaderDir(f)
	f.Comment(fmt.Sprintf("TestLayoutMatchesGCC compiles layoutProgram against the cached %s (set %s) with gcc\n"+
		"and checks every size, alignment, offset and constant against the Go declarations.", g.api.Header, g.api.Set))
	f.Func().Id("TestLayoutMatchesGCC").Params(jen.Id("t").Op("*").Qual("testing", "T")).Block(
		jen.Id("dir").Op(":=").Id("layoutHeaderDir").Call(jen.Id("t")),
		jen.If(jen.List(jen.Id("_"), jen.Id("err")).Op(":=").Qual("os", "Stat").Call(
			jen.Qual("path/filepath", "Join").Call(jen.Id("dir"), jen.Lit(g.api.Header))), jen.Id("err").Op("!=").Nil()).Block(
			g.missingHeader()...,
		),
		g.missingExtra(),
		jen.Id("tmp").Op(":=").Id("t").Dot("TempDir").Call(),
		jen.Id("src").Op(":=").Qual("path/filepath", "Join").Call(jen.Id("tmp"), jen.Lit("layout.c")),
		jen.Qual(req, "NoError").Call(jen.Id("t"), jen.Qual("os", "WriteFile").Call(jen.Id("src"), jen.Index().Byte().Parens(jen.Id("layoutProgram")), jen.Op("0o644"))),
		jen.Id("args").Op(":=").Index().String().Values(append([]jen.Code{jen.Lit("-std=gnu11"), jen.Lit("-I"), jen.Id("dir")}, defines...)...),
		jen.For(jen.List(jen.Id("_"), jen.Id("inc")).Op(":=").Range().Index().String().Values(includes...)).Block(
			jen.List(jen.Id("abs"), jen.Id("err")).Op(":=").Qual("path/filepath", "Abs").Call(jen.Id("inc")),
			jen.Qual(req, "NoError").Call(jen.Id("t"), jen.Id("err")),
			jen.Id("args").Op("=").Append(jen.Id("args"), jen.Lit("-I"), jen.Id("abs")),
		),
		jen.Id("bin").Op(":=").Qual("path/filepath", "Join").Call(jen.Id("tmp"), jen.Lit("layout")),
		jen.Id("args").Op("=").Append(jen.Id("args"), jen.Lit("-o"), jen.Id("bin"), jen.Id("src")),
		jen.List(jen.Id("out"), jen.Id("err")).Op(":=").Qual("os/exec", "Command").Call(jen.Lit("gcc"), jen.Id("args").Op("...")).Dot("CombinedOutput").Call(),
		jen.Qual(req, "NoError").Call(jen.Id("t"), jen.Id("err"), jen.Lit("gcc: %s"), jen.Id("out")),
		jen.List(jen.Id("out"), jen.Id("err")).Op("=").Qual("os/exec", "Command").Call(jen.Id("bin")).Dot("Output").Call(),
		jen.Qual(req, "NoError").Call(jen.Id("t"), jen.Id("err")),
		jen.Id("gcc").Op(":=").Map(jen.String()).Index(jen.Lit(2)).Uint64().Values(),
		jen.For(jen.List(jen.Id("_"), jen.Id("line")).Op(":=").Range().Qual("strings", "Split").Call(
			jen.Qual("strings", "TrimSpace").Call(jen.String().Parens(jen.Id("out"))), jen.Lit("\n"))).Block(
			jen.Id("f").Op(":=").Qual("strings", "Split").Call(jen.Id("line"), jen.Lit("\t")),
			jen.Qual(req, "Len").Call(jen.Id("t"), jen.Id("f"), jen.Lit(3), jen.Id("line")),
			jen.List(jen.Id("a"), jen.Id("errA")).Op(":=").Qual("strconv", "ParseUint").Call(jen.Id("f").Index(jen.Lit(1)), jen.Lit(10), jen.Lit(64)),
			jen.List(jen.Id("b"), jen.Id("errB")).Op(":=").Qual("strconv", "ParseUint").Call(jen.Id("f").Index(jen.Lit(2)), jen.Lit(10), jen.Lit(64)),
			jen.Qual(req, "NoError").Call(jen.Id("t"), jen.Qual("errors", "Join").Call(jen.Id("errA"), jen.Id("errB")), jen.Id("line")),
			jen.Id("gcc").Index(jen.Id("f").Index(jen.Lit(0))).Op("=").Index(jen.Lit(2)).Uint64().Values(jen.Id("a"), jen.Id("b")),
		),
		jen.Id("want").Op(":=").Id("goLayout").Call(),
		jen.Qual(req, "Len").Call(jen.Id("t"), jen.Id("gcc"), jen.Len(jen.Id("want")), jen.Lit("one gcc line per check")),
		jen.For(jen.List(jen.Id("_"), jen.Id("w")).Op(":=").Range().Id("want")).Block(
			jen.List(jen.Id("got"), jen.Id("ok")).Op(":=").Id("gcc").Index(jen.Id("w").Dot("key")),
			jen.If(jen.Op("!").Qual("github.com/stretchr/testify/assert", "True").Call(jen.Id("t"), jen.Id("ok"), jen.Lit("gcc printed nothing for %s"), jen.Id("w").Dot("key"))).Block(jen.Continue()),
			jen.Qual("github.com/stretchr/testify/assert", "Equal").Call(jen.Id("t"), jen.Id("got"), jen.Index(jen.Lit(2)).Uint64().Values(jen.Id("w").Dot("a"), jen.Id("w").Dot("b")), jen.Lit("%s: gcc (first) vs Go (second)"), jen.Id("w").Dot("key")),
		),
	)
	return f, nil
}

// emitHeaderDir writes layoutHeaderDir: where the test finds the header set, by the
// config's rule (headers.dir under the cache, or under the module root).
func (g *goPkg) emitHeaderDir(f *jen.File) {
	h := g.cfg.Headers
	sub := strings.Split(strings.ReplaceAll(h.Dir, "{set}", g.api.Set), "/")
	var body []jen.Code
	if h.CacheEnv != "" || h.CacheName != "" {
		name := h.CacheName
		if name == "" {
			name = g.cfg.Package
		}
		if h.CacheEnv != "" {
			body = append(body, jen.Id("base").Op(":=").Qual("os", "Getenv").Call(jen.Lit(h.CacheEnv)))
		} else {
			body = append(body, jen.Id("base").Op(":=").Lit(""))
		}
		body = append(body,
			jen.If(jen.Id("base").Op("==").Lit("")).Block(
				jen.If(jen.Id("x").Op(":=").Qual("os", "Getenv").Call(jen.Lit("XDG_CACHE_HOME")), jen.Id("x").Op("!=").Lit("")).Block(
					jen.Id("base").Op("=").Qual("path/filepath", "Join").Call(jen.Id("x"), jen.Lit(name)),
				).Else().Block(
					jen.List(jen.Id("home"), jen.Id("err")).Op(":=").Qual("os", "UserHomeDir").Call(),
					jen.Qual("github.com/stretchr/testify/require", "NoError").Call(jen.Id("t"), jen.Id("err")),
					jen.Id("base").Op("=").Qual("path/filepath", "Join").Call(jen.Id("home"), jen.Lit(".cache"), jen.Lit(name)),
				),
			))
	} else {
		rel, err := filepath.Rel(g.cfg.Out, ".")
		if err != nil {
			rel = "."
		}
		body = append(body, jen.Id("base").Op(":=").Lit(filepath.ToSlash(rel)))
	}
	args := []jen.Code{jen.Id("base")}
	for _, s := range sub {
		args = append(args, jen.Lit(s))
	}
	body = append(body, jen.Return(jen.Qual("path/filepath", "Join").Call(args...)))
	f.Comment(fmt.Sprintf("layoutHeaderDir is the folder of header set %s.", g.api.Set))
	f.Func().Id("layoutHeaderDir").Params(jen.Id("t").Op("*").Qual("testing", "T")).String().Block(body...)
}

// missingExtra checks that the set's extra headers are cached too (nothing without them).
func (g *goPkg) missingExtra() jen.Code {
	if len(g.setExtra) == 0 {
		return jen.Null()
	}
	var list []jen.Code
	for _, h := range g.setExtra {
		list = append(list, jen.Lit(h))
	}
	return jen.For(jen.List(jen.Id("_"), jen.Id("h")).Op(":=").Range().Index().String().Values(list...)).Block(
		jen.If(jen.List(jen.Id("_"), jen.Id("err")).Op(":=").Qual("os", "Stat").Call(
			jen.Qual("path/filepath", "Join").Call(jen.Id("dir"), jen.Id("h"))), jen.Id("err").Op("!=").Nil()).Block(
			g.missingHeader()...,
		),
	)
}

// missingHeader is what the layout test does without its header: skip, saying what to
// run; under the config's strict variable fail instead, unless the manifest says the set
// comes from a source the strict run cannot reach (headers.optionalSources).
func (g *goPkg) missingHeader() []jen.Code {
	msg := fmt.Sprintf("header set %s is not in %%s: %s", g.api.Set, g.cfg.fetchHint())
	skip := jen.Id("t").Dot("Skipf").Call(jen.Lit(msg), jen.Id("dir"))
	if g.cfg.StrictEnv == "" || g.optionalHeader {
		if g.optionalHeader {
			return []jen.Code{jen.Comment(fmt.Sprintf("%s comes from %s, which a strict run (%s) may not reach: a skip, never a failure.", g.api.Set, g.headerSource, g.cfg.StrictEnv)), skip}
		}
		return []jen.Code{skip}
	}
	return []jen.Code{
		jen.If(jen.Qual("os", "Getenv").Call(jen.Lit(g.cfg.StrictEnv)).Op("!=").Lit("")).Block(
			jen.Id("t").Dot("Fatalf").Call(jen.Lit(msg+" ("+g.cfg.StrictEnv+" is set)"), jen.Id("dir"))),
		skip,
	}
}
