package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"modernc.org/cc/v4"
)

// systemTypedefs are the typedefs from the C library that the headers may use, with the
// Go type each maps to. Any other typedef from outside the header is an error.
var systemTypedefs = map[string]string{
	"size_t": "uint64", "ssize_t": "int64", "ptrdiff_t": "int64",
	"int8_t": "int8", "int16_t": "int16", "int32_t": "int32", "int64_t": "int64",
	"uint8_t": "uint8", "uint16_t": "uint16", "uint32_t": "uint32", "uint64_t": "uint64",
	"intptr_t": "int64", "uintptr_t": "uintptr",
}

// scalarNames spells cc's arithmetic kinds as C does.
var scalarNames = map[cc.Kind]string{
	cc.Bool: "_Bool", cc.Char: "char", cc.SChar: "signed char", cc.UChar: "unsigned char",
	cc.Short: "short", cc.UShort: "unsigned short", cc.Int: "int", cc.UInt: "unsigned int",
	cc.Long: "long", cc.ULong: "unsigned long", cc.LongLong: "long long",
	cc.ULongLong: "unsigned long long", cc.Float: "float", cc.Double: "double",
}

var (
	baseConfigOnce sync.Once
	baseConfig     *cc.Config
	baseConfigErr  error
)

// newCCConfig returns a fresh copy of the host configuration; cc.NewConfig runs the C
// compiler, so it runs once per process and settings become #defines in the source.
func newCCConfig(includes []string) (*cc.Config, error) {
	baseConfigOnce.Do(func() {
		baseConfig, baseConfigErr = cc.NewConfig(runtime.GOOS, runtime.GOARCH)
	})
	if baseConfigErr != nil {
		return nil, fmt.Errorf("configure the C parser (needs gcc on PATH): %w", baseConfigErr)
	}
	c := *baseConfig
	c.EvalAllMacros = true
	c.ABILayout = true
	c.IncludePaths = append(append([]string{}, includes...), c.IncludePaths...)
	c.SysIncludePaths = append(append([]string{}, includes...), c.SysIncludePaths...)
	return &c, nil
}

// translate preprocesses, parses and type-checks the header in one setting.
func translate(header string, includes []string, st Setting) (*cc.AST, error) {
	ccfg, err := newCCConfig(includes)
	if err != nil {
		return nil, err
	}
	var pre strings.Builder
	for _, d := range st.Defines {
		fmt.Fprintf(&pre, "#define %s 1\n", d)
	}
	fmt.Fprintf(&pre, "#include <%s>\n", header)
	return cc.Translate(ccfg, []cc.Source{
		{Name: "<predefined>", Value: ccfg.Predefined},
		{Name: "<builtin>", Value: cc.Builtin},
		{Name: "ncclgo-" + st.Name + ".c", Value: pre.String()},
	})
}

// declError is an untranslatable declaration that the skip list does not name.
type declError struct {
	Pos, Kind, Name, Why string
}

func (e *declError) Error() string {
	return fmt.Sprintf("%s: %s %s: %s (translate it or add a skip entry with a reason)", e.Pos, e.Kind, e.Name, e.Why)
}

// parser turns one header set (all settings) into an API.
type parser struct {
	cfg     *Config
	set     string
	hdrPath string
	stubs   []string // our own include folders: typedefs from there are mirrored
	lines   []string
	api     *API
	errs    []error

	types    map[string]*TypeDecl // by key: "struct tag", "union tag", "enum tag", typedef name, nested name
	funcs    map[string]*Func     // by Go name
	consts   map[string]*Const
	enums    map[string]*Enumerator
	skipped  map[string]bool // kind+name already counted as skipped
	external map[string]*TypeDecl
	order    int
	setting  string
	fnSyms   map[string]bool // every function symbol of the current setting

	constMember map[*cc.Declarator]bool // struct members declared with a const specifier
	nestParent  *TypeDecl               // the aggregate whose field types are being converted
	nestField   string
}

// parseSet parses the header of one set in every setting of cfg.
func parseSet(cfg *Config, root, cache, set string) (*API, error) {
	dir := filepath.Join(cache, "header", set)
	hdr := filepath.Join(dir, cfg.Header)
	src, err := os.ReadFile(hdr)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("header %s of set %s is not in the cache (%s): run make headers: %w", cfg.Header, set, dir, ErrNoHeaders)
		}
		return nil, err
	}
	p := &parser{
		cfg: cfg, set: set, hdrPath: hdr, lines: strings.Split(string(src), "\n"),
		api:   &API{Set: set, Header: cfg.Header, Counts: Counts{}},
		types: map[string]*TypeDecl{}, funcs: map[string]*Func{}, consts: map[string]*Const{},
		enums: map[string]*Enumerator{}, skipped: map[string]bool{}, external: map[string]*TypeDecl{},
	}
	includes := []string{dir}
	for _, inc := range cfg.Include {
		abs := filepath.Join(root, inc)
		includes = append(includes, abs)
		p.stubs = append(p.stubs, abs)
	}
	// Translate the settings concurrently, then walk them in order: names are claimed
	// setting by setting.
	asts := make([]*cc.AST, len(cfg.Settings))
	errs := make([]error, len(cfg.Settings))
	var wg sync.WaitGroup
	for i, st := range cfg.Settings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			asts[i], errs[i] = translate(cfg.Header, includes, st)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("parse %s (set %s, setting %s): %w", cfg.Header, set, st.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, st := range cfg.Settings {
		p.setting = st.Name
		p.translationUnit(asts[i])
	}
	if len(p.errs) > 0 {
		return nil, joinErrors(p.errs)
	}
	p.finish()
	return p.api, nil
}

func (p *parser) fail(pos, kind, name, why string) {
	if r := p.cfg.skipped(kind, name); r != "" {
		p.skip(kind, name, r)
		return
	}
	p.errs = append(p.errs, &declError{Pos: pos, Kind: kind, Name: name, Why: why})
}

func (p *parser) skip(kind, name, reason string) {
	if p.skipped[kind+" "+name] {
		return
	}
	p.skipped[kind+" "+name] = true
	p.api.Counts.skip(kind, reason)
}

func (p *parser) inHeader(pos string) bool { return pos == p.hdrPath }

func (p *parser) inStub(file string) bool {
	for _, s := range p.stubs {
		if strings.HasPrefix(file, s+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func (p *parser) pos(file string, line, col int) string {
	return fmt.Sprintf("%s:%d:%d", filepath.Base(file), line, col)
}

func (p *parser) translationUnit(ast *cc.AST) {
	p.fnSyms = map[string]bool{}
	p.constMember = map[*cc.Declarator]bool{}
	for l := ast.TranslationUnit; l != nil; l = l.TranslationUnit {
		if ed := l.ExternalDeclaration; ed.Case == cc.ExternalDeclarationDecl && ed.Declaration.Case == cc.DeclarationDecl {
			for s := ed.Declaration.DeclarationSpecifiers; s != nil; s = s.DeclarationSpecifiers {
				if s.TypeSpecifier != nil {
					p.collectConst(s.TypeSpecifier.StructOrUnionSpecifier)
				}
			}
		}
	}
	for l := ast.TranslationUnit; l != nil; l = l.TranslationUnit {
		ed := l.ExternalDeclaration
		switch ed.Case {
		case cc.ExternalDeclarationFuncDef:
			d := ed.FunctionDefinition.Declarator
			p.fnSyms[d.Name()] = true
			if p.inHeader(d.Position().Filename) {
				pos := d.Position()
				p.fail(p.pos(pos.Filename, pos.Line, pos.Column), "function", d.Name(), "function defined in the header (static inline), not a library symbol")
			}
		case cc.ExternalDeclarationDecl:
			p.declaration(ed.Declaration)
		}
	}
	p.macros(ast)
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

func (p *parser) declaration(d *cc.Declaration) {
	if d.Case != cc.DeclarationDecl {
		return
	}
	for s := d.DeclarationSpecifiers; s != nil; s = s.DeclarationSpecifiers {
		ts := s.TypeSpecifier
		if ts == nil {
			continue
		}
		if su := ts.StructOrUnionSpecifier; su != nil && su.StructDeclarationList != nil && p.inHeader(su.Position().Filename) {
			p.aggregate(su.Type(), "", "", p.posOf(su.Position().Filename, su.Position().Line, su.Position().Column))
		}
		if es := ts.EnumSpecifier; es != nil && es.EnumeratorList != nil && p.inHeader(es.Position().Filename) {
			p.aggregate(es.Type(), "", "", p.posOf(es.Position().Filename, es.Position().Line, es.Position().Column))
		}
	}
	for il := d.InitDeclaratorList; il != nil; il = il.InitDeclaratorList {
		dr := il.InitDeclarator.Declarator
		pos := dr.Position()
		if !p.inHeader(pos.Filename) {
			continue
		}
		where := p.pos(pos.Filename, pos.Line, pos.Column)
		switch {
		case dr.IsTypename():
			p.typedef(dr, specTypedef(d.DeclarationSpecifiers), where)
		case dr.Type().Kind() == cc.Function:
			p.function(dr, where, pos.Line, pos.Column)
		default:
			p.fail(where, "variable", dr.Name(), "object declarations cannot be bound")
		}
	}
}

func (p *parser) posOf(file string, line, col int) string { return p.pos(file, line, col) }

// publicName is the identifier written in the header source at a declarator position
// (before macro expansion): cuMemAlloc for the symbol cuMemAlloc_v2.
func (p *parser) publicName(line, col int) string {
	if line < 1 || line > len(p.lines) {
		return ""
	}
	s := p.lines[line-1]
	if col < 1 || col > len(s) {
		return ""
	}
	s = s[col-1:]
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if end >= 0 {
		s = s[:end]
	}
	return s
}

func (p *parser) function(dr *cc.Declarator, where string, line, col int) {
	sym := dr.Name()
	p.fnSyms[sym] = true
	public := p.publicName(line, col)
	if public == "" {
		public = sym
	}
	if r := p.cfg.skipped("function", sym); r != "" {
		p.skip("function", sym, r)
		return
	}
	if r := p.cfg.skipped("function", public); r != "" {
		p.skip("function", public+" -> "+sym, r)
		return
	}
	ft := dr.Type().(*cc.FunctionType)
	sig, err := p.signature(ft)
	if err != nil {
		p.fail(where, "function", sym, err.Error())
		return
	}
	if sig.Variadic {
		p.fail(where, "function", sym, "variadic functions cannot be called through a trampoline")
		return
	}
	name := p.cfg.goName(public)
	for _, suf := range []string{"_ptds", "_ptsz"} {
		if strings.HasSuffix(sym, suf) && !strings.HasSuffix(public, suf) {
			name += camel(suf)
		}
	}
	if f := p.funcs[name]; f != nil && f.Symbol != sym {
		// A name already taken by another symbol in an earlier setting: the legacy form.
		name += "Legacy"
	}
	if !validGoName(name) {
		p.fail(where, "function", sym, fmt.Sprintf("Go name %q is not an exported identifier", name))
		return
	}
	if f := p.funcs[name]; f != nil {
		if f.Symbol != sym {
			p.fail(where, "function", sym, fmt.Sprintf("Go name %s is taken by %s (%s)", name, f.Symbol, f.Pos))
			return
		}
		if a, b := cSignature(sym, unnamed(f.Sig)), cSignature(sym, unnamed(sig)); a != b {
			p.fail(where, "function", sym, fmt.Sprintf("declared differently in setting %s: %s vs %s", p.setting, b, a))
			return
		}
		if !contains(f.Settings, p.setting) {
			f.Settings = append(f.Settings, p.setting)
		}
		return
	}
	p.funcs[name] = &Func{Symbol: sym, Public: public, GoName: name, Settings: []string{p.setting}, Sig: sig, Pos: where}
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

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
		return nil, fmt.Errorf("C type %s has no Go equivalent", t)
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
	case u.Kind == Pointer && u.Elem.Kind == Struct && p.types["struct "+u.Elem.Name] == nil:
		d.Handle = true // pointer to an incomplete struct
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
	return nil, fmt.Errorf("C type %s has no Go equivalent", t)
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
		if target := functionAlias(toks); target != "" && p.fnSyms[target] || p.fnSyms[expandPT(toks, p.setting)] {
			p.skipped["macro-noval "+name] = true
			p.api.Counts.skip("macro", "names a function (gives the function its public name)")
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

// functionAlias returns the identifier a macro body consists of, or the argument of an
// __CUDA_API_PTDS/PTSZ(x) body.
func functionAlias(toks []cc.Token) string {
	switch {
	case len(toks) == 1 && toks[0].Ch == rune(cc.IDENTIFIER):
		return toks[0].SrcStr()
	case len(toks) == 4 && toks[1].SrcStr() == "(" && toks[3].SrcStr() == ")" && strings.HasPrefix(toks[0].SrcStr(), "__CUDA_API_PT"):
		return toks[2].SrcStr()
	}
	return ""
}

// expandPT spells what an __CUDA_API_PTDS/PTSZ(x) body names in a setting with the
// per-thread default stream (x_ptds / x_ptsz).
func expandPT(toks []cc.Token, _ string) string {
	if len(toks) == 4 && strings.HasPrefix(toks[0].SrcStr(), "__CUDA_API_PT") {
		return toks[2].SrcStr() + "_" + strings.ToLower(strings.TrimPrefix(toks[0].SrcStr(), "__CUDA_API_"))
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

// finish sorts the declarations into the API, names them and counts them.
func (p *parser) finish() {
	api := p.api
	for _, f := range p.funcs {
		api.Funcs = append(api.Funcs, f)
		api.Counts.emit("function")
	}
	sort.Slice(api.Funcs, func(i, j int) bool { return api.Funcs[i].GoName < api.Funcs[j].GoName })
	for _, d := range p.types {
		api.Types = append(api.Types, d)
	}
	sort.Slice(api.Types, func(i, j int) bool { return api.Types[i].Order < api.Types[j].Order })
	for _, d := range p.external {
		api.External = append(api.External, d)
	}
	sort.Slice(api.External, func(i, j int) bool { return api.External[i].CName < api.External[j].CName })
	for _, d := range api.Types {
		api.Counts.emit(declKindName(d))
		for _, e := range d.Values {
			if r := p.cfg.skipped("enumerator", e.Name); r != "" {
				p.skip("enumerator", e.Name, r)
				continue
			}
			api.Enums = append(api.Enums, e)
			api.Counts.emit("enumerator")
		}
	}
	for _, c := range p.consts {
		api.Consts = append(api.Consts, c)
		api.Counts.emit("macro")
	}
	sort.Slice(api.Consts, func(i, j int) bool { return api.Consts[i].Name < api.Consts[j].Name })
}

func declKindName(d *TypeDecl) string {
	switch d.Kind {
	case DeclStruct:
		return "struct"
	case DeclUnion:
		return "union"
	case DeclEnum:
		return "enum"
	}
	return "typedef"
}
