package main

import (
	"fmt"
	"sort"

	"modernc.org/cc/v4"
)

// Library globals and the macros that stand for their addresses.
//
// Some headers define handles as the address of an object the library exports, cast to
// the handle type. Open MPI's mpi.h declares
//
//	extern struct ompi_predefined_communicator_t ompi_mpi_comm_world;
//	#define MPI_COMM_WORLD OMPI_PREDEFINED_GLOBAL(MPI_Comm, ompi_mpi_comm_world)
//
// where OMPI_PREDEFINED_GLOBAL(type, global) is ((type) ((void *) &(global))). Such a
// macro has no value at generation time: the address is known once the library is
// loaded. The generator records every extern object (a Global) and every object-like
// macro whose expansion is a cast of the address of one of them (a GlobalAddr); the Go
// package gets one accessor per macro that resolves the object's symbol with dlsym in the
// loaded library (emit_globals.go). An extern object that no macro addresses is an error
// unless the config skips it (kind "variable") with a reason.

// Global is an object the header declares extern: a library global.
type Global struct {
	Symbol string
	Type   *CType // nil when the type has no mirror (an incomplete struct is fine)
	Pos    string
	used   bool
}

// GlobalAddr is an object-like macro whose value is the address of a Global, cast to a
// typedef of the header (Type), or to void * (Type "").
type GlobalAddr struct {
	Name   string `json:",omitempty"`
	GoName string `json:",omitempty"`
	Global string `json:",omitempty"` // symbol of the object
	Type   string `json:",omitempty"` // C typedef the address is cast to, or ""
	Pos    string `json:",omitempty"`
}

// variable records an extern object declaration.
func (p *parser) variable(dr *cc.Declarator, where string) {
	name := dr.Name()
	if r := p.cfg.skipped("variable", name); r != "" {
		p.skip("variable", name, r)
		return
	}
	if p.globals == nil {
		p.globals = map[string]*Global{}
	}
	if p.globals[name] != nil {
		return
	}
	p.globals[name] = &Global{Symbol: name, Pos: where}
}

// maxExpand bounds macro expansion depth (a cycle guard; headers nest a few levels).
const maxExpand = 16

// expandMacro expands the replacement list of an object-like macro, function-like macros
// included, into token spellings. ok is false for what this small expander does not
// handle (# and ## operators, unbalanced arguments).
func expandMacro(macros map[string]*cc.Macro, toks []cc.Token) (out []string, ok bool) {
	src := make([]string, len(toks))
	for i, t := range toks {
		src[i] = t.SrcStr()
	}
	return expandTokens(macros, src, 0, map[string]bool{})
}

func expandTokens(macros map[string]*cc.Macro, src []string, depth int, active map[string]bool) ([]string, bool) {
	if depth > maxExpand {
		return nil, false
	}
	var out []string
	for i := 0; i < len(src); i++ {
		s := src[i]
		if s == "#" || s == "##" {
			return nil, false
		}
		m := macros[s]
		if m == nil || active[s] {
			out = append(out, s)
			continue
		}
		var body []string
		if m.IsFnLike {
			if i+1 >= len(src) || src[i+1] != "(" {
				out = append(out, s)
				continue
			}
			args, end, ok := macroArgs(src, i+1)
			if !ok {
				return nil, false
			}
			i = end
			params := map[string][]string{}
			for j, prm := range m.Params {
				if j < len(args) {
					params[prm.SrcStr()] = args[j]
				}
			}
			for _, t := range m.ReplacementList() {
				if a, isParam := params[t.SrcStr()]; isParam {
					body = append(body, a...)
				} else {
					body = append(body, t.SrcStr())
				}
			}
		} else {
			for _, t := range m.ReplacementList() {
				body = append(body, t.SrcStr())
			}
		}
		active[s] = true
		exp, ok := expandTokens(macros, body, depth+1, active)
		delete(active, s)
		if !ok {
			return nil, false
		}
		out = append(out, exp...)
	}
	return out, true
}

// macroArgs splits the arguments of a call whose "(" is at src[open]; end is the index of
// the closing ")".
func macroArgs(src []string, open int) (args [][]string, end int, ok bool) {
	depth := 0
	var cur []string
	for i := open; i < len(src); i++ {
		switch s := src[i]; {
		case s == "(":
			depth++
			if depth == 1 {
				continue
			}
		case s == ")":
			depth--
			if depth == 0 {
				return append(args, cur), i, true
			}
		case s == "," && depth == 1:
			args = append(args, cur)
			cur = nil
			continue
		}
		cur = append(cur, src[i])
	}
	return nil, 0, false
}

// globalAddress recognises the expansion of a macro that is the address of a recorded
// global, cast to a type: "( ( MPI_Comm ) ( ( void * ) & ( ompi_mpi_comm_world ) ) )".
// Every token before "&" must be a parenthesis, "*", void, const or a typedef of the
// header; the first typedef is the type the address is cast to. After the global only
// closing parentheses may follow.
func (p *parser) globalAddress(toks []string) (global, typ string, ok bool) {
	amp := -1
	for i, s := range toks {
		if s == "&" {
			if amp >= 0 {
				return "", "", false
			}
			amp = i
		}
	}
	if amp < 0 {
		return "", "", false
	}
	for _, s := range toks[:amp] {
		switch s {
		case "(", ")", "*", "void", "const":
			continue
		}
		if d := p.types[s]; d != nil && d.Kind == DeclTypedef {
			if typ == "" {
				typ = s
			}
			continue
		}
		return "", "", false
	}
	rest := toks[amp+1:]
	for len(rest) > 0 && rest[0] == "(" {
		rest = rest[1:]
	}
	if len(rest) == 0 || p.globals[rest[0]] == nil {
		return "", "", false
	}
	global = rest[0]
	for _, s := range rest[1:] {
		if s != ")" {
			return "", "", false
		}
	}
	return global, typ, true
}

// globalMacro records name as a GlobalAddr when its expansion addresses a global.
func (p *parser) globalMacro(macros map[string]*cc.Macro, name string, m *cc.Macro, where string) bool {
	if m.IsFnLike || len(p.globals) == 0 {
		return false
	}
	toks, ok := expandMacro(macros, m.ReplacementList())
	if !ok {
		return false
	}
	global, typ, ok := p.globalAddress(toks)
	if !ok {
		return false
	}
	if p.addrs == nil {
		p.addrs = map[string]*GlobalAddr{}
	}
	if old := p.addrs[name]; old != nil {
		if old.Global != global || old.Type != typ {
			p.fail(where, "macro", name, fmt.Sprintf("addresses another global in setting %s", p.setting))
		}
		return true
	}
	p.addrs[name] = &GlobalAddr{Name: name, Global: global, Type: typ, Pos: where}
	p.globals[global].used = true
	return true
}

// unaddressedGlobals fails every recorded global that no macro addresses (the skip list
// may name it, kind "variable").
func (p *parser) unaddressedGlobals() {
	names := make([]string, 0, len(p.globals))
	for n := range p.globals {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if g := p.globals[n]; !g.used {
			p.fail(g.Pos, "variable", n, "extern object that no macro of the header takes the address of")
		}
	}
}

// finishGlobals moves the globals and their macros into the API and counts them.
func (p *parser) finishGlobals() {
	for _, g := range p.globals {
		if g.used {
			p.api.Counts.emit("variable")
		}
	}
	for _, a := range p.addrs {
		p.api.Globals = append(p.api.Globals, a)
		p.api.Counts.emit("macro")
	}
	sort.Slice(p.api.Globals, func(i, j int) bool { return p.api.Globals[i].Name < p.api.Globals[j].Name })
}

// globalText is how a snapshot records a GlobalAddr: "(MPI_Comm)&ompi_mpi_comm_world".
func globalText(a *GlobalAddr) string {
	t := a.Type
	if t == "" {
		t = "void *"
	}
	return "(" + t + ")&" + a.Global
}

// globalEntities are the snapshot lines of the global-address macros.
func globalEntities(api *API) []*entity {
	var es []*entity
	for _, a := range api.Globals {
		es = append(es, &entity{Key: "global " + a.Name, Head: globalText(a)})
	}
	return es
}

// isFuncTypedef reports whether t names a typedef of a function type
// (typedef int (MPI_User_function)(void *, ...)): a pointer to it is a C function address.
func (g *goPkg) isFuncTypedef(t *CType) bool {
	if t == nil || t.Kind != Named {
		return false
	}
	for i := 0; i < maxExpand; i++ {
		d := g.lookup(t)
		if d == nil || d.Kind != DeclTypedef {
			return false
		}
		if d.Underlying.Kind == FuncPtr {
			return true
		}
		if d.Underlying.Kind != Named {
			return false
		}
		t = d.Underlying
	}
	return false
}
