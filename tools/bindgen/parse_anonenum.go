package main

import (
	"fmt"

	"modernc.org/cc/v4"
)

// anonEnum turns the enumerators of an enum without tag, typedef or declarator
// (enum { MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, ... };) into untyped integer constants:
// C code uses them as int constants, and there is no type to give them.
func (p *parser) anonEnum(es *cc.EnumSpecifier) {
	et, ok := es.Type().(*cc.EnumType)
	if !ok {
		return
	}
	for _, e := range et.Enumerators() {
		name := e.Token.SrcStr()
		ep := e.Position()
		where := p.pos(ep.Filename, ep.Line, ep.Column)
		if r := p.cfg.skipped("enumerator", name); r != "" {
			p.skip("enumerator", name, r)
			continue
		}
		var n int64
		switch v := e.Value().(type) {
		case cc.Int64Value:
			n = int64(v)
		case cc.UInt64Value:
			n = int64(v)
		default:
			p.fail(where, "enumerator", name, "no integer value")
			continue
		}
		c := &Const{Name: name, Kind: ConstInt, Int: n, Pos: where, Enumerator: true}
		if old := p.consts[name]; old != nil {
			if constText(old) != constText(c) {
				p.fail(where, "enumerator", name, fmt.Sprintf("has another value in setting %s", p.setting))
			}
			continue
		}
		p.consts[name] = c
	}
}
