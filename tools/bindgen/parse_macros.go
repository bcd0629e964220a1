package main

import (
	"fmt"
	"sort"
	"strings"

	"modernc.org/cc/v4"
)

// macros classifies the object-like macros the header defines.
func (p *parser) macros(ast *cc.AST) {
	names := make([]string, 0, len(ast.Macros))
	for n, m := range ast.Macros {
		if p.inHeader(m.Position().Filename) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		m := ast.Macros[name]
		mp := m.Position()
		where := p.pos(mp.Filename, mp.Line, mp.Column)
		if p.skipped["macro "+name] || p.skipped["macro-noval "+name] {
			continue
		}
		if old := p.consts[name]; old != nil {
			if c, err := p.macroConst(name, m, where); err != nil || constText(c) != constText(old) {
				p.fail(where, "macro", name, fmt.Sprintf("has another value in setting %s", p.setting))
			}
			continue
		}
		if r := p.cfg.skipped("macro", name); r != "" {
			p.skip("macro", name, r)
			continue
		}
		if m.IsFnLike {
			p.fail(where, "macro", name, "function-like macro")
			continue
		}
		toks := m.ReplacementList()
		if len(toks) == 0 {
			p.skipped["macro-noval "+name] = true
			p.api.Counts.skip("macro", "empty definition (include guard, feature or attribute switch)")
			continue
		}
		if target := functionAlias(toks, p.cfg.SpellingMacros); target != "" && p.fnSyms[target] || p.fnSyms[expandSpelling(toks, p.cfg.SpellingMacros)] {
			p.skipped["macro-noval "+name] = true
			p.api.Counts.skip("macro", "names a function (gives the function its public name)")
			continue
		}
		if p.globalMacro(ast.Macros, name, m, where) {
			continue
		}
		c, err := p.macroConst(name, m, where)
		if err != nil {
			p.fail(where, "macro", name, err.Error())
			continue
		}
		p.consts[name] = c
	}
}

// functionAlias returns the identifier a macro body consists of, or the argument x of a
// body F(x) where F is one of the config's spelling macros.
func functionAlias(toks []cc.Token, spelling map[string]string) string {
	switch {
	case len(toks) == 1 && toks[0].Ch == rune(cc.IDENTIFIER):
		return toks[0].SrcStr()
	case len(toks) == 4 && toks[1].SrcStr() == "(" && toks[3].SrcStr() == ")" && spelling[toks[0].SrcStr()] != "":
		return toks[2].SrcStr()
	}
	return ""
}

// expandSpelling spells what a body F(x) names when F is a spelling macro: x followed by
// F's suffix (cuda.h's __CUDA_API_PTDS(x) is x_ptds in the per-thread setting).
func expandSpelling(toks []cc.Token, spelling map[string]string) string {
	if len(toks) == 4 && toks[1].SrcStr() == "(" && spelling[toks[0].SrcStr()] != "" {
		return toks[2].SrcStr() + spelling[toks[0].SrcStr()]
	}
	return ""
}

func (p *parser) macroConst(name string, m *cc.Macro, where string) (*Const, error) {
	v := m.Value()
	c := &Const{Name: name, Pos: where}
	if sv, ok := v.(cc.StringValue); ok {
		c.Kind, c.Str = ConstString, strings.TrimSuffix(string(sv), "\x00")
		return c, nil
	}
	if m.Type() != nil && m.Type().Kind() == cc.Ptr {
		c.Kind = ConstPointer
		switch v := v.(type) {
		case cc.Int64Value:
			c.Uint = uint64(v)
		case cc.UInt64Value:
			c.Uint = uint64(v)
		default:
			return nil, fmt.Errorf("pointer macro without an address value")
		}
		if td := m.Type().Typedef(); td != nil && p.inHeader(td.Position().Filename) {
			c.Type = td.Name()
		}
		return c, nil
	}
	switch v := v.(type) {
	case cc.Int64Value:
		c.Kind, c.Int = ConstInt, int64(v)
	case cc.UInt64Value:
		c.Kind, c.Uint = ConstUint, uint64(v)
	case cc.Float64Value:
		c.Kind, c.Float = ConstFloat, float64(v)
	case cc.StringValue:
		c.Kind, c.Str = ConstString, strings.TrimSuffix(string(v), "\x00")
	default:
		return nil, fmt.Errorf("no constant value (brace initializer, expression or attribute)")
	}
	return c, nil
}
