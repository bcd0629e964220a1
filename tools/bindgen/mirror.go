package main

import (
	"fmt"
	"strings"
)

// mirror writes the C declarations the cgo preamble needs in place of the real header
// (which is not available at build time): typedefs, forward declarations, and full
// definitions of the aggregates passed by value, with the header's layout. Enums are
// mirrored as the integer type of their size. Anonymous aggregates get a tag of the form
// <cPrefix><name>, which changes no layout.
type mirror struct {
	g    *goPkg
	out  strings.Builder
	done map[string]bool
}

func newMirror(g *goPkg) *mirror { return &mirror{g: g, done: map[string]bool{}} }

func (m *mirror) once(key string) bool {
	if m.done[key] {
		return false
	}
	m.done[key] = true
	return true
}

// tag is the C tag the mirror uses for an aggregate.
func (m *mirror) tag(d *TypeDecl) string {
	if !d.Anonymous {
		return d.CName
	}
	return m.g.cfg.CPrefix + strings.NewReplacer(".", "_").Replace(d.CName)
}

// enumInt is the integer type an enum is mirrored as.
func enumInt(d *TypeDecl) string {
	switch {
	case d.Size == 8 && d.Unsigned:
		return "unsigned long long"
	case d.Size == 8:
		return "long long"
	case d.Unsigned:
		return "unsigned int"
	}
	return "int"
}

// base spells non-derived types in the mirror.
func (m *mirror) base(t *CType) string {
	switch t.Kind {
	case Struct, Union:
		if d := m.g.lookup(t); d != nil {
			return map[Kind]string{Struct: "struct ", Union: "union "}[t.Kind] + m.tag(d)
		}
		return declKindWord(t) + " " + t.Name
	case Enum:
		if d := m.g.lookup(t); d != nil {
			return enumInt(d)
		}
		return "int"
	}
	return t.Name
}

func (m *mirror) decl(t *CType, name string) string { return cDeclWith(t, name, m.base) }

// need declares what t refers to; byValue asks for complete aggregate definitions.
func (m *mirror) need(t *CType, byValue bool) error {
	switch t.Kind {
	case Void, Scalar:
		return nil
	case Pointer:
		return m.need(t.Elem, false)
	case Array:
		return m.need(t.Elem, byValue)
	case FuncPtr:
		if err := m.need(t.Sig.Result, false); err != nil {
			return err
		}
		for _, p := range t.Sig.Params {
			if err := m.need(p.Type, false); err != nil {
				return err
			}
		}
		return nil
	case Struct, Union:
		d := m.g.lookup(t)
		if d == nil {
			if m.once("fwd " + t.Name) {
				fmt.Fprintf(&m.out, "%s;\n", m.base(t))
			}
			return nil
		}
		return m.aggregate(d, byValue)
	case Enum:
		return nil
	case Named:
		d := m.g.lookup(t)
		if d == nil {
			if isSystem(t.Name) {
				return nil
			}
			return fmt.Errorf("unknown typedef %s", t.Name)
		}
		switch d.Kind {
		case DeclEnum:
			if m.once("typedef " + t.Name) {
				fmt.Fprintf(&m.out, "typedef %s %s;\n", enumInt(d), t.Name)
			}
			return nil
		case DeclStruct, DeclUnion:
			if err := m.aggregate(d, byValue); err != nil {
				return err
			}
			if m.once("typedef " + t.Name) {
				fmt.Fprintf(&m.out, "typedef %s %s;\n", m.base(&CType{Kind: kindOf(d), Name: d.CName}), t.Name)
			}
			return nil
		}
		if err := m.need(d.Underlying, byValue); err != nil {
			return err
		}
		if m.once("typedef " + t.Name) {
			fmt.Fprintf(&m.out, "typedef %s;\n", m.decl(d.Underlying, t.Name))
		}
		return nil
	}
	return fmt.Errorf("cannot mirror %s", cType(t))
}

func kindOf(d *TypeDecl) Kind {
	return map[DeclKind]Kind{DeclStruct: Struct, DeclUnion: Union, DeclEnum: Enum, DeclTypedef: Named}[d.Kind]
}

// aggregate forward-declares a struct or union and, when byValue, defines it.
func (m *mirror) aggregate(d *TypeDecl, byValue bool) error {
	spell := m.base(&CType{Kind: kindOf(d), Name: d.CName})
	if m.once("fwd " + spell) {
		fmt.Fprintf(&m.out, "%s;\n", spell)
	}
	if !byValue || !m.once("def "+spell) {
		return nil
	}
	var body strings.Builder
	for i, f := range d.Fields {
		if err := m.need(f.Type, true); err != nil {
			return err
		}
		name := f.Name
		if name == "" {
			name = fmt.Sprintf("%sanon%d", m.g.cfg.CPrefix, i)
		}
		fmt.Fprintf(&body, "\t%s;\n", m.decl(f.Type, name))
	}
	fmt.Fprintf(&m.out, "%s {\n%s};\n", spell, body.String())
	return nil
}
