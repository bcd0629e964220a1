package main

import (
	"fmt"

	"modernc.org/cc/v4"
)

func (p *parser) signature(ft *cc.FunctionType) (*Signature, error) {
	res, err := p.ctype(ft.Result(), "")
	if err != nil {
		return nil, err
	}
	sig := &Signature{Result: res, Variadic: ft.IsVariadic()}
	for i, prm := range ft.Parameters() {
		if prm.Type().Kind() == cc.Void && len(ft.Parameters()) == 1 {
			break
		}
		t, err := p.ctype(prm.Type(), "")
		if err != nil {
			return nil, fmt.Errorf("parameter %d (%s): %w", i, prm.Name(), err)
		}
		sig.Params = append(sig.Params, Param{Name: prm.Name(), Type: t})
	}
	return sig, nil
}

// ctype converts a cc type. nest names an anonymous aggregate met here (a field's type).
func (p *parser) ctype(t cc.Type, nest string) (*CType, error) {
	isConst := t.Attributes().IsConst()
	if td := t.Typedef(); td != nil {
		name := td.Name()
		if err := p.useTypedef(td); err != nil {
			return nil, err
		}
		return &CType{Kind: Named, Name: name, Const: isConst, Size: t.Size(), Align: int64(t.Align())}, nil
	}
	switch x := t.(type) {
	case *cc.PointerType:
		el, err := p.ctype(x.Elem(), "")
		if err != nil {
			return nil, err
		}
		return &CType{Kind: Pointer, Elem: el, Const: isConst, Size: x.Size(), Align: int64(x.Align())}, nil
	case *cc.ArrayType:
		if x.Len() < 0 || x.IsVLA() {
			return nil, fmt.Errorf("array of unknown length")
		}
		el, err := p.ctype(x.Elem(), nest)
		if err != nil {
			return nil, err
		}
		return &CType{Kind: Array, Elem: el, Len: x.Len(), Size: x.Size(), Align: int64(x.Align())}, nil
	case *cc.FunctionType:
		sig, err := p.signature(x)
		if err != nil {
			return nil, err
		}
		return &CType{Kind: FuncPtr, Sig: sig}, nil
	case *cc.StructType, *cc.UnionType, *cc.EnumType:
		d, err := p.aggregate(t, nest, "", "")
		if err != nil {
			return nil, err
		}
		if d == nil { // incomplete struct, only behind pointers
			return &CType{Kind: Struct, Name: tagOf(t), Const: isConst}, nil
		}
		k := map[DeclKind]Kind{DeclStruct: Struct, DeclUnion: Union, DeclEnum: Enum}[d.Kind]
		return &CType{Kind: k, Name: d.CName, Const: isConst, Size: d.Size, Align: d.Align}, nil
	}
	if t.Kind() == cc.Void {
		return &CType{Kind: Void, Name: "void", Const: isConst}, nil
	}
	name, ok := scalarNames[t.Kind()]
	if !ok {
		return nil, fmt.Errorf("no Go equivalent for C type %s", t)
	}
	return &CType{Kind: Scalar, Name: name, Const: isConst, Size: t.Size(), Align: int64(t.Align())}, nil
}

func tagOf(t cc.Type) string {
	var tok cc.Token
	switch x := t.(type) {
	case *cc.StructType:
		tok = x.Tag()
	case *cc.UnionType:
		tok = x.Tag()
	case *cc.EnumType:
		tok = x.Tag()
	}
	return tok.SrcStr()
}

// useTypedef checks that a typedef met in a declaration can be mirrored.
func (p *parser) useTypedef(td *cc.Declarator) error {
	file := td.Position().Filename
	name := td.Name()
	switch {
	case p.inHeader(file):
		return nil
	case p.inStub(file):
		if p.external[name] == nil {
			d, err := p.typedefDecl(td, "", p.pos(file, td.Position().Line, td.Position().Column))
			if err != nil {
				return err
			}
			p.external[name] = d
		}
		return nil
	case systemTypedefs[name] != "":
		return nil
	}
	return fmt.Errorf("typedef %s from %s has no Go mapping", name, file)
}

// specTypedef returns the typedef name a declaration's specifiers use, or "".
func specTypedef(s *cc.DeclarationSpecifiers) string {
	for ; s != nil; s = s.DeclarationSpecifiers {
		if ts := s.TypeSpecifier; ts != nil && ts.Case == cc.TypeSpecifierTypeName {
			return ts.Token.SrcStr()
		}
	}
	return ""
}

func (p *parser) typedef(dr *cc.Declarator, spec, where string) {
	name := dr.Name()
	if r := p.cfg.skipped("type", name); r != "" {
		p.skip("type", name, r)
		return
	}
	old := p.types[name]
	d, err := p.typedefDecl(dr, spec, where)
	if err != nil {
		p.fail(where, "type", name, err.Error())
		return
	}
	switch {
	case d == nil:
	case old == nil:
		p.types[name] = d
	case old.Kind == DeclTypedef && cDecl(old.Underlying, name) != cDecl(d.Underlying, name):
		p.fail(where, "type", name, fmt.Sprintf("declared differently in setting %s: %s vs %s",
			p.setting, cDecl(d.Underlying, name), cDecl(old.Underlying, name)))
	}
}

// typedefDecl builds the declaration of a typedef. A typedef that names an anonymous
// struct/union/enum gives that aggregate its name and returns nil.
func (p *parser) typedefDecl(dr *cc.Declarator, spec, where string) (*TypeDecl, error) {
	name := dr.Name()
	t := dr.Type()
	switch t.(type) {
	case *cc.StructType, *cc.UnionType, *cc.EnumType:
		if tagOf(t) == "" {
			_, err := p.aggregate(t, "", name, where)
			return nil, err
		}
	}
	// Underlying type as written: strip the typedef itself.
	u, err := p.underlying(t, spec)
	if err != nil {
		return nil, err
	}
	p.order++
	d := &TypeDecl{Kind: DeclTypedef, CName: name, CSpell: name, Underlying: u, Size: t.Size(), Align: int64(t.Align()), Pos: where, Order: p.order}
	switch {
	case u.Kind == Named && !isSystem(u.Name):
		d.Alias = true
	case u.Kind == Pointer && u.Elem.Kind == Struct && (p.types["struct "+u.Elem.Name] == nil || p.cfg.handle(name)):
		d.Handle = true // pointer to an incomplete struct, or one the config keeps a handle
	}
	return d, nil
}

func isSystem(name string) bool { return systemTypedefs[name] != "" }

// underlying converts the type a typedef names, without the typedef's own name.
func (p *parser) underlying(t cc.Type, spec string) (*CType, error) {
	switch t.(type) {
	case *cc.PointerType, *cc.ArrayType:
	default:
		if spec != "" { // typedef OTHER NAME;
			if !isSystem(spec) && p.types[spec] == nil && p.external[spec] == nil {
				return nil, fmt.Errorf("typedef of unknown typedef %s", spec)
			}
			return &CType{Kind: Named, Name: spec, Size: t.Size(), Align: int64(t.Align())}, nil
		}
	}
	switch x := t.(type) {
	case *cc.PointerType:
		el, err := p.ctype(x.Elem(), "")
		if err != nil {
			return nil, err
		}
		return &CType{Kind: Pointer, Elem: el, Size: x.Size(), Align: int64(x.Align())}, nil
	case *cc.ArrayType:
		el, err := p.ctype(x.Elem(), "")
		if err != nil {
			return nil, err
		}
		return &CType{Kind: Array, Elem: el, Len: x.Len(), Size: x.Size(), Align: int64(x.Align())}, nil
	case *cc.FunctionType: // typedef int (F)(void *): a function type, used through F *
		sig, err := p.signature(x)
		if err != nil {
			return nil, err
		}
		return &CType{Kind: FuncPtr, Sig: sig}, nil
	case *cc.StructType, *cc.UnionType, *cc.EnumType:
		d, err := p.aggregate(t, "", "", "")
		if err != nil {
			return nil, err
		}
		if d == nil {
			return &CType{Kind: Struct, Name: tagOf(t)}, nil
		}
		k := map[DeclKind]Kind{DeclStruct: Struct, DeclUnion: Union, DeclEnum: Enum}[d.Kind]
		return &CType{Kind: k, Name: d.CName, Size: d.Size, Align: d.Align}, nil
	}
	if t.Kind() == cc.Void {
		return &CType{Kind: Void, Name: "void"}, nil
	}
	if name, ok := scalarNames[t.Kind()]; ok {
		return &CType{Kind: Scalar, Name: name, Size: t.Size(), Align: int64(t.Align())}, nil
	}
	return nil, fmt.Errorf("no Go equivalent for C type %s", t)
}

// aggregate registers a struct, union or enum definition and returns its declaration
// (nil for an incomplete struct). nest names an anonymous one met as a field type; tdName
// names an anonymous one given a name by a typedef.
func (p *parser) aggregate(t cc.Type, nest, tdName, where string) (*TypeDecl, error) {
	var kind DeclKind
	var word string
	switch t.(type) {
	case *cc.StructType:
		kind, word = DeclStruct, "struct"
	case *cc.UnionType:
		kind, word = DeclUnion, "union"
	case *cc.EnumType:
		kind, word = DeclEnum, "enum"
	}
	tag := tagOf(t)
	// A definition the skip list names ("struct tag") leaves the struct incomplete:
	// behind a pointer typedef it is an opaque handle.
	if tag != "" && kind != DeclEnum {
		if r := p.cfg.skipped("type", word+" "+tag); r != "" {
			p.skip("type", word+" "+tag, r)
			return nil, nil
		}
	}
	key, spell := "", ""
	switch {
	case tag != "":
		key, spell = word+" "+tag, word+" "+tag
	case tdName != "":
		key, spell = tdName, tdName
	case nest != "":
		key, spell = nest, ""
	default:
		return nil, fmt.Errorf("anonymous %s outside a typedef or a field", word)
	}
	if d := p.types[key]; d != nil {
		return d, nil
	}
	if t.IsIncomplete() {
		if kind == DeclStruct || kind == DeclUnion {
			return nil, nil
		}
		return nil, fmt.Errorf("incomplete %s", spell)
	}
	p.order++
	d := &TypeDecl{Kind: kind, CName: key, CSpell: spell, Size: t.Size(), Align: int64(t.Align()), Pos: where, Anonymous: tag == "", Order: p.order}
	if tag != "" {
		d.CName = tag
	}
	if tag == "" && tdName == "" {
		d.ParentDecl, d.FieldName = p.nestParent, p.nestField
	}
	p.types[key] = d
	switch x := t.(type) {
	case *cc.EnumType:
		for _, e := range x.Enumerators() {
			v := e.Value()
			var n int64
			switch v := v.(type) {
			case cc.Int64Value:
				n = int64(v)
			case cc.UInt64Value:
				n = int64(v)
				if v > 1<<31-1 {
					d.Unsigned = true
				}
			default:
				return nil, fmt.Errorf("enumerator %s has no integer value", e.Token.SrcStr())
			}
			if n < 0 {
				d.Unsigned = false
			}
			ep := e.Position()
			d.Values = append(d.Values, &Enumerator{Name: e.Token.SrcStr(), Value: n, Enum: key, Pos: p.pos(ep.Filename, ep.Line, ep.Column)})
		}
	case *cc.StructType:
		if err := p.fields(d, x.NumFields(), x.FieldByIndex); err != nil {
			return nil, err
		}
	case *cc.UnionType:
		if err := p.fields(d, x.NumFields(), x.FieldByIndex); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (p *parser) fields(d *TypeDecl, n int, at func(int) *cc.Field) error {
	for i := 0; i < n; i++ {
		f := at(i)
		if f.IsBitfield() {
			return fmt.Errorf("%s: bit-field %s is not supported", d.CName, f.Name())
		}
		if f.IsFlexibleArrayMember() {
			return fmt.Errorf("%s: flexible array member %s is not supported", d.CName, f.Name())
		}
		nest := d.CName + "." + f.Name()
		if f.Name() == "" {
			nest = fmt.Sprintf("%s.%d", d.CName, i)
		}
		p.nestParent, p.nestField = d, f.Name()
		ft, err := p.ctype(f.Type(), nest)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", d.CName, f.Name(), err)
		}
		if fd := f.Declarator(); fd != nil && p.constMember[fd] {
			// cc/v4 keeps "const" of a member on its declarator, not its type.
			b := ft
			for b.Kind == Pointer || b.Kind == Array {
				b = b.Elem
			}
			b.Const = true
		}
		d.Fields = append(d.Fields, &FieldDecl{Name: f.Name(), Type: ft, Offset: f.Offset(), Size: f.Type().Size(), Align: int64(f.Type().Align())})
	}
	return nil
}

// collectConst records the members of a struct or union definition (and of the ones
// nested in it) whose specifiers include const: cc/v4 drops that const from the type of a
// pointer member ("const char *name").
func (p *parser) collectConst(su *cc.StructOrUnionSpecifier) {
	if su == nil {
		return
	}
	for l := su.StructDeclarationList; l != nil; l = l.StructDeclarationList {
		sd := l.StructDeclaration
		if sd == nil {
			continue
		}
		isConst := false
		for q := sd.SpecifierQualifierList; q != nil; q = q.SpecifierQualifierList {
			if q.TypeQualifier != nil && q.TypeQualifier.Case == cc.TypeQualifierConst {
				isConst = true
			}
			if q.TypeSpecifier != nil {
				p.collectConst(q.TypeSpecifier.StructOrUnionSpecifier)
			}
		}
		for dl := sd.StructDeclaratorList; dl != nil; dl = dl.StructDeclaratorList {
			if dl.StructDeclarator != nil && dl.StructDeclarator.Declarator != nil && isConst {
				p.constMember[dl.StructDeclarator.Declarator] = true
			}
		}
	}
}
