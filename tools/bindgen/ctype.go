package main

import (
	"strconv"
	"strings"
)

// C type printing, keeping const. cDecl("p", t) declares p with type t as C writes it.

// cDecl spells a declaration of name with type t; name may be empty (an abstract type).
func cDecl(t *CType, name string) string { return cDeclWith(t, name, cBase) }

// cDeclWith is cDecl with the spelling of non-derived types given by base.
func cDeclWith(t *CType, name string, base func(*CType) string) string {
	switch t.Kind {
	case Pointer:
		inner := "*"
		if t.Const {
			inner += "const"
			if name != "" {
				inner += " "
			}
		}
		inner += name
		if t.Elem.Kind == Array || t.Elem.Kind == FuncPtr {
			inner = "(" + inner + ")"
		}
		return cDeclWith(t.Elem, inner, base)
	case Array:
		return cDeclWith(t.Elem, name+"["+strconv.FormatInt(t.Len, 10)+"]", base)
	case FuncPtr:
		return cDeclWith(t.Sig.Result, name+"("+cParamsWith(t.Sig, base)+")", base)
	}
	b := base(t)
	if t.Const {
		b = "const " + b
	}
	if name == "" {
		return b
	}
	return b + " " + name
}

// cBase spells a non-derived type.
func cBase(t *CType) string {
	switch t.Kind {
	case Struct:
		return "struct " + t.Name
	case Union:
		return "union " + t.Name
	case Enum:
		return "enum " + t.Name
	}
	return t.Name
}

// cType spells a type without a name.
func cType(t *CType) string { return cDecl(t, "") }

func cParams(s *Signature) string { return cParamsWith(s, cBase) }

func cParamsWith(s *Signature, base func(*CType) string) string {
	if len(s.Params) == 0 && !s.Variadic {
		return "void"
	}
	var parts []string
	for _, p := range s.Params {
		parts = append(parts, cDeclWith(p.Type, p.Name, base))
	}
	if s.Variadic {
		parts = append(parts, "...")
	}
	return strings.Join(parts, ", ")
}

// cSignature spells a function prototype.
func cSignature(name string, s *Signature) string {
	return cDecl(s.Result, name+"("+cParams(s)+")")
}
