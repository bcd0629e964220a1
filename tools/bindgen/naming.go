package main

import (
	"go/token"
	"strings"
	"unicode"
)

// The naming rule, applied to every C name (functions, types, enumerators, macros):
//
//  1. drop the longest configured prefix that matches (nccl, NCCL_, cu, CU, CU_, CUDA_);
//  2. drop a "_t" suffix (and, for a struct/union/enum known only by its tag, a "_st",
//     "_s", "_union" or "_enum" suffix);
//  3. split at "_"; a word without lower-case letters is title-cased (ERROR -> Error),
//     any other word gets its first letter upper-cased (memcpyHtoD -> MemcpyHtoD);
//     the words are joined.
//
// cuda functions add a suffix after that: see funcGoName in parse.go.

// goName applies the naming rule to a C name.
func goName(cname string, prefixes []string) string {
	return camel(strings.TrimSuffix(stripPrefix(cname, prefixes), "_t"))
}

// tagGoName names a struct, union or enum that has a tag and no typedef.
func tagGoName(tag string, prefixes []string) string {
	s := stripPrefix(tag, prefixes)
	for _, suf := range []string{"_st", "_s", "_union", "_enum", "_t"} {
		if t, ok := strings.CutSuffix(s, suf); ok && t != "" {
			s = t
			break
		}
	}
	return camel(s)
}

func stripPrefix(cname string, prefixes []string) string {
	best := ""
	for _, p := range prefixes {
		if len(p) > len(best) && strings.HasPrefix(cname, p) && len(cname) > len(p) {
			best = p
		}
	}
	return cname[len(best):]
}

// camel joins the "_"-separated words of s, title-casing all-caps words and upper-casing
// the first letter of the others.
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(s, "_") {
		if w == "" {
			continue
		}
		if !strings.ContainsFunc(w, unicode.IsLower) {
			w = strings.ToLower(w)
		}
		b.WriteString(strings.ToUpper(w[:1]))
		b.WriteString(w[1:])
	}
	return b.String()
}

// validGoName reports whether s can be an exported Go identifier.
func validGoName(s string) bool {
	return s != "" && token.IsIdentifier(s) && token.IsExported(s)
}

// reservedParams are names the generated function bodies use themselves.
var reservedParams = map[string]bool{
	"fp": true, "err": true, "lib": true, "dl": true, "unsafe": true, "C": true,
	"resultError": true, "r": true, "s": true,
}

// paramGoName turns a C parameter name into a Go one: first letter lower-cased
// (Flags -> flags); unnamed parameters become argN; Go keywords and the names the
// generated bodies use get an Arg suffix.
func paramGoName(name string, i int) string {
	if name != "" && !strings.ContainsFunc(name, unicode.IsLower) {
		name = strings.ToLower(name) // FLAGS -> flags
	} else if name != "" {
		name = strings.ToLower(name[:1]) + name[1:]
	}
	switch {
	case name == "":
		return "arg" + itoa(i)
	case token.IsKeyword(name) || reservedParams[name] || isPredeclared(name):
		return name + "Arg"
	}
	return name
}

func isPredeclared(s string) bool {
	switch s {
	case "bool", "byte", "complex64", "complex128", "error", "float32", "float64", "int", "int8",
		"int16", "int32", "int64", "rune", "string", "uint", "uint8", "uint16", "uint32", "uint64",
		"uintptr", "true", "false", "iota", "nil", "append", "cap", "clear", "close", "complex",
		"copy", "delete", "imag", "len", "make", "max", "min", "new", "panic", "print", "println",
		"real", "recover", "any", "comparable":
		return true
	}
	return false
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
