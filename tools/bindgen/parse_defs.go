package main

import (
	"fmt"
	"sort"
	"strings"

	"modernc.org/cc/v4"
)

// Macro definitions: a brace initializer (NCCL_CONFIG_INITIALIZER) or a function-like
// macro (NCCL_VERSION) has no value, so the snapshot does not record it as a constant.
// The config's macroDefinitions name macros whose definitions the snapshot records as
// written (`define NAME(params): body`), with those of every macro of the header their
// bodies use, transitively: with the layouts of the types they name, a test can rebuild
// in C what the header defines and compile it where the header itself is not cached
// (raw/nccl checks nccl.NewConfig against NCCL_CONFIG_INITIALIZER that way).

// Define is the definition of one macro.
type Define struct {
	Name   string   `json:",omitempty"`
	Params []string `json:",omitempty"` // function-like: the parameter names
	FnLike bool     `json:",omitempty"` // function-like (NAME() has no parameters)
	Body   string   `json:",omitempty"` // the replacement list, tokens separated as in the header
	Pos    string   `json:",omitempty"`
}

// head is how the snapshot names a definition: NAME, or NAME(a,b) for a function-like one.
func (d *Define) head() string {
	if !d.FnLike {
		return d.Name
	}
	return d.Name + "(" + strings.Join(d.Params, ",") + ")"
}

// definitions records the configured macro definitions of one setting.
func (p *parser) definitions(ast *cc.AST) {
	if len(p.cfg.MacroDefinitions) == 0 {
		return
	}
	if p.defines == nil {
		p.defines = map[string]*Define{}
	}
	seen := map[string]bool{}
	var visit func(name, from string)
	visit = func(name, from string) {
		if seen[name] {
			return
		}
		seen[name] = true
		m := ast.Macros[name]
		if m == nil || !p.inHeader(m.Position().Filename) {
			return // see missingDefinitions; a used name that is no macro of the header is C's
		}
		mp := m.Position()
		where := p.pos(mp.Filename, mp.Line, mp.Column)
		d, err := macroDefinition(m, where)
		if err != nil {
			p.fail(where, "macro", name, err.Error())
			return
		}
		if old := p.defines[name]; old != nil {
			if old.head()+": "+old.Body != d.head()+": "+d.Body {
				p.fail(where, "macro", name, fmt.Sprintf("has another definition in setting %s", p.setting))
			}
		} else {
			p.defines[name] = d
		}
		params := map[string]bool{}
		for _, prm := range d.Params {
			params[prm] = true
		}
		for _, tok := range m.ReplacementList() {
			if id := tok.SrcStr(); tok.Ch == rune(cc.IDENTIFIER) && !params[id] {
				visit(id, name)
			}
		}
	}
	for _, name := range p.cfg.MacroDefinitions {
		visit(name, "")
	}
}

// macroDefinition renders the definition of m.
func macroDefinition(m *cc.Macro, where string) (*Define, error) {
	d := &Define{Name: m.Name.SrcStr(), FnLike: m.IsFnLike, Pos: where}
	if m.VarArg >= 0 && m.IsFnLike {
		return nil, fmt.Errorf("variadic macro: its definition cannot be recorded")
	}
	for _, prm := range m.Params {
		d.Params = append(d.Params, prm.SrcStr())
	}
	var b strings.Builder
	for i, tok := range m.ReplacementList() {
		if i > 0 && len(tok.Sep()) > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tok.SrcStr())
	}
	d.Body = b.String()
	return d, nil
}

// missingDefinitions fails a target set that defines a macro of macroDefinitions in no
// setting (an older set may lack it: it records nothing).
func (p *parser) missingDefinitions() {
	if p.set != p.cfg.Target() {
		return
	}
	for _, name := range p.cfg.MacroDefinitions {
		if p.defines[name] == nil {
			p.fail(p.pos(p.hdrPath, 1, 1), "macro", name, "macroDefinitions names it, but the header does not define it")
		}
	}
}

// finishDefinitions sorts the recorded definitions into the API.
func (p *parser) finishDefinitions() {
	for _, d := range p.defines {
		p.api.Defines = append(p.api.Defines, d)
	}
	sort.Slice(p.api.Defines, func(i, j int) bool { return p.api.Defines[i].Name < p.api.Defines[j].Name })
}
