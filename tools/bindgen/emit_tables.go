package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dave/jennifer/jen"
)

// TablesConfig asks for tables of facts the generator knows, so that hand-written code
// reads them instead of copying them (ztables.go).
type TablesConfig struct {
	// Fields are structs whose fields become a table: C name, Go name, C type, offset,
	// size and the first header set that has the field (from the snapshots).
	Fields []FieldTable `json:"fields"`
	// Names are enum types (typedef names) that get a Name method returning the C name
	// of a value.
	Names []string `json:"names"`
}

// FieldTable is one table of TablesConfig.Fields.
type FieldTable struct {
	Type string `json:"type"` // C typedef name of the struct: "ncclConfig_t"
	Var  string `json:"var"`  // Go variable: "ConfigFields"
}

// fieldLayout is the field layout of a typedef'd struct in one snapshot: field name ->
// "@offset: type".
func fieldLayout(snap map[string]*entity, typ string) map[string]bool {
	e := snap["type "+typ]
	if e == nil {
		return nil
	}
	names := map[string]bool{}
	for _, line := range e.Body {
		if name, _, ok := strings.Cut(line, " @"); ok {
			names[name] = true
		}
	}
	return names
}

// versionCode turns a header set's version text ("2.26.2") into the library's version
// code (22602) with the first of the library's version formats whose From the code
// reaches; 0 when the library has no formats or the text is not dotted numbers.
func (c *Config) versionCode(version string) int {
	if c.Library == nil {
		return 0
	}
	parts := strings.Split(version, ".")
	for _, f := range c.Library.VersionFormats {
		if len(f.Divisors) != len(parts) {
			continue
		}
		code := 0
		for i, p := range parts {
			n, err := strconv.Atoi(p)
			if err != nil {
				return 0
			}
			code += n * f.Divisors[i]
		}
		if code >= f.From {
			return code
		}
	}
	return 0
}

// emitTables writes ztables.go: the field tables and the Name methods of
// TablesConfig. snaps are the snapshots of cfg.Sets, oldest first.
func (g *goPkg) emitTables(snaps []map[string]*entity) (*jen.File, error) {
	t := g.cfg.Tables
	f := jen.NewFile(g.cfg.Package)
	g.header(f)
	oldest := g.cfg.setVersion(g.cfg.Sets[0])
	if len(t.Fields) > 0 {
		f.Comment("StructField is one field of a C struct in a generated table (" + t.Fields[0].Var + ", ...).")
		f.Type().Id("StructField").Struct(
			jen.Id("C").String().Comment("C name"),
			jen.Id("Go").String().Comment("Go field name; \"\" for a field the Go struct leaves out"),
			jen.Id("Type").String().Comment("C type"),
			jen.Id("Offset").Uintptr().Comment("offset in the struct, in bytes"),
			jen.Id("Size").Uintptr().Comment("size in bytes"),
			jen.Id("Since").String().Comment(fmt.Sprintf("first pinned header set with the field (%s: the oldest pinned, or older)", oldest)),
			jen.Id("SinceCode").Int().Comment("Since as a version code, comparable with the loaded library's version; 0 without version formats"),
		)
	}
	for _, ft := range t.Fields {
		agg := g.byKey[ft.Type]
		if agg == nil {
			return nil, fmt.Errorf("tables: %s is not a type of %s", ft.Type, g.api.Header)
		}
		if agg.Kind == DeclTypedef {
			agg = g.lookup(agg.Underlying)
		}
		if agg == nil || agg.Kind != DeclStruct {
			return nil, fmt.Errorf("tables: %s is not a struct", ft.Type)
		}
		layouts := make([]map[string]bool, len(snaps))
		for i, s := range snaps {
			layouts[i] = fieldLayout(s, ft.Type)
		}
		var rows []jen.Code
		for _, fd := range agg.Fields {
			if fd.Name == "" {
				continue
			}
			since := ""
			for i, l := range layouts {
				if l[fd.Name] {
					since = g.cfg.setVersion(g.cfg.Sets[i])
					break
				}
			}
			if since == "" {
				return nil, fmt.Errorf("tables: %s.%s is in no snapshot", ft.Type, fd.Name)
			}
			rows = append(rows, jen.Values(jen.Lit(fd.Name), jen.Lit(fd.GoName), jen.Lit(cType(fd.Type)),
				jen.Lit(int(fd.Offset)), jen.Lit(int(fd.Size)), jen.Lit(since), jen.Lit(g.cfg.versionCode(since))))
		}
		f.Comment(fmt.Sprintf("%s are the fields of %s (%s in header set %s), in order, each", ft.Var, ft.Type, agg.CSpell, g.api.Set))
		f.Comment(fmt.Sprintf("with the first pinned header set that has it (%s: the oldest pinned, or older).", oldest))
		f.Var().Id(ft.Var).Op("=").Index().Id("StructField").Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, rows...)
	}
	for _, name := range t.Names {
		d := g.byKey[name]
		if d != nil && d.Kind == DeclTypedef {
			d = g.lookup(d.Underlying)
		}
		if d == nil || d.Kind != DeclEnum {
			return nil, fmt.Errorf("tables: %s is not an enum of %s", name, g.api.Header)
		}
		goType := g.goTypeName(&CType{Kind: Named, Name: name})
		var cases []jen.Code
		seen := map[int64]bool{}
		for _, e := range d.Values {
			if e.GoName == "" || seen[e.Value] { // skipped, or an alias of an earlier name
				continue
			}
			seen[e.Value] = true
			cases = append(cases, jen.Case(jen.Id(e.GoName)).Block(jen.Return(jen.Lit(e.Name))))
		}
		f.Comment(fmt.Sprintf("Name returns the C name of v (%q), also when no library is loaded; a value", d.Values[0].Name))
		f.Comment(fmt.Sprintf("that %s of header set %s does not name reads %q.", g.api.Header, g.api.Set, name+"(12)"))
		f.Func().Params(jen.Id("v").Id(goType)).Id("Name").Params().String().Block(
			jen.Switch(jen.Id("v")).Block(cases...),
			jen.Return(jen.Lit(name+"(").Op("+").Qual("strconv", "Itoa").Call(jen.Int().Call(jen.Id("v"))).Op("+").Lit(")")),
		)
	}
	return f, nil
}
