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

// translate preprocesses, parses and type-checks the header (and the extra headers after
// it) in one setting.
func translate(header string, extra, includes []string, st Setting) (*cc.AST, error) {
	ccfg, err := newCCConfig(includes)
	if err != nil {
		return nil, err
	}
	var pre strings.Builder
	for _, d := range st.Defines {
		fmt.Fprintf(&pre, "#define %s 1\n", d)
	}
	fmt.Fprintf(&pre, "#include <%s>\n", header)
	for _, h := range extra {
		fmt.Fprintf(&pre, "#include <%s>\n", h)
	}
	return cc.Translate(ccfg, []cc.Source{
		{Name: "<predefined>", Value: ccfg.Predefined},
		{Name: "<builtin>", Value: cc.Builtin},
		{Name: "bindgen-" + st.Name + ".c", Value: pre.String()},
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
	ownDir  string              // with extra headers: the set's folder, all of whose files are the header's
	files   map[string][]string // lines of the header's files, by path (publicName)
	stubs   []string            // our own include folders: typedefs from there are mirrored
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

	globals map[string]*Global     // extern objects (parse_globals.go)
	addrs   map[string]*GlobalAddr // macros standing for their addresses

	defines map[string]*Define // recorded macro definitions (parse_defs.go)
}

// parseSet parses the header of one set in every setting of cfg.
func parseSet(cfg *Config, root, cache, set string) (*API, error) {
	dir := cfg.headerDir(root, cache, set)
	hdr := filepath.Join(dir, cfg.Header)
	src, err := os.ReadFile(hdr)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("header %s of set %s is not in the cache (%s): %s: %w", cfg.Header, set, dir, cfg.fetchHint(), ErrNoHeaders)
		}
		return nil, err
	}
	extra, err := extraHeaders(cfg, root, set, dir)
	if err != nil {
		return nil, err
	}
	p := &parser{
		cfg: cfg, set: set, hdrPath: hdr,
		files: map[string][]string{hdr: strings.Split(string(src), "\n")},
		api:   &API{Set: set, Header: cfg.Header, Extra: extra, Counts: Counts{}},
		types: map[string]*TypeDecl{}, funcs: map[string]*Func{}, consts: map[string]*Const{},
		enums: map[string]*Enumerator{}, skipped: map[string]bool{}, external: map[string]*TypeDecl{},
	}
	if len(extra) > 0 {
		p.ownDir = filepath.Clean(dir)
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
			asts[i], errs[i] = translate(cfg.Header, extra, includes, st)
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
	p.unaddressedGlobals()
	p.missingDefinitions()
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

func (p *parser) inHeader(pos string) bool {
	return pos == p.hdrPath || p.ownDir != "" && strings.HasPrefix(filepath.Clean(pos), p.ownDir+string(filepath.Separator))
}

func (p *parser) inStub(file string) bool {
	for _, s := range p.stubs {
		if strings.HasPrefix(file, s+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func (p *parser) pos(file string, line, col int) string {
	name := filepath.Base(file)
	if p.ownDir != "" {
		if rel, err := filepath.Rel(p.ownDir, filepath.Clean(file)); err == nil && !strings.HasPrefix(rel, "..") {
			name = filepath.ToSlash(rel)
		}
	}
	return fmt.Sprintf("%s:%d:%d", name, line, col)
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
	p.definitions(ast)
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
			p.aggregate(su.Type(), "", "", p.pos(su.Position().Filename, su.Position().Line, su.Position().Column))
		}
		if es := ts.EnumSpecifier; es != nil && es.EnumeratorList != nil && p.inHeader(es.Position().Filename) {
			if tagOf(es.Type()) == "" && d.InitDeclaratorList == nil {
				p.anonEnum(es)
				continue
			}
			p.aggregate(es.Type(), "", "", p.pos(es.Position().Filename, es.Position().Line, es.Position().Column))
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
		case dr.Type().Kind() == cc.Function && isInline(d.DeclarationSpecifiers):
			p.skip("function", dr.Name(), "declared inline: the header defines it for its own callers (NCCL_HOST_DEVICE_INLINE), the library does not export it")
		case dr.Type().Kind() == cc.Function:
			p.function(dr, where, pos.Filename, pos.Line, pos.Column)
		default:
			p.variable(dr, where)
		}
	}
}

// publicName is the identifier written in the header source at a declarator position
// (before macro expansion): cuMemAlloc for the symbol cuMemAlloc_v2.
func (p *parser) publicName(file string, line, col int) string {
	lines, ok := p.files[file]
	if !ok {
		if b, err := os.ReadFile(file); err == nil {
			lines = strings.Split(string(b), "\n")
		}
		p.files[file] = lines
	}
	if line < 1 || line > len(lines) {
		return ""
	}
	s := lines[line-1]
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

// isInline says whether declaration specifiers include the inline function specifier.
func isInline(s *cc.DeclarationSpecifiers) bool {
	for ; s != nil; s = s.DeclarationSpecifiers {
		if s.FunctionSpecifier != nil && s.FunctionSpecifier.Case == cc.FunctionSpecifierInline {
			return true
		}
	}
	return false
}

func (p *parser) function(dr *cc.Declarator, where, file string, line, col int) {
	sym := dr.Name()
	p.fnSyms[sym] = true
	public := p.publicName(file, line, col)
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
	for _, suf := range p.cfg.SymbolSuffixes {
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
		if c.Enumerator {
			api.Counts.emit("enumerator")
		} else {
			api.Counts.emit("macro")
		}
	}
	sort.Slice(api.Consts, func(i, j int) bool { return api.Consts[i].Name < api.Consts[j].Name })
	p.finishGlobals()
	p.finishDefinitions()
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
