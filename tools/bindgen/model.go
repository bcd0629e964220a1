package main

// The intermediate model: what a header declares, independent of cc/v4 and of Go.

// Kind classifies a CType.
type Kind int

// CType kinds.
const (
	Void    Kind = iota
	Scalar       // a C arithmetic type spelled by Name ("int", "unsigned long long", "float")
	Named        // a typedef name (Name), declared in the header or a known system typedef
	Pointer      // pointer to Elem
	Array        // Len elements of Elem
	FuncPtr      // a function type (only behind a Pointer); Sig holds it
	Struct       // struct Name (a tag, or a generated name for an anonymous one)
	Union        // union Name
	Enum         // enum Name
)

// CType is a C type as written in a declaration, with its qualifiers.
type CType struct {
	Kind  Kind       `json:",omitempty"`
	Name  string     `json:",omitempty"`
	Const bool       `json:",omitempty"`
	Elem  *CType     `json:",omitempty"`
	Len   int64      `json:",omitempty"`
	Sig   *Signature `json:",omitempty"`
	Size  int64      `json:",omitempty"`
	Align int64      `json:",omitempty"`
}

// Signature is a function prototype.
type Signature struct {
	Result   *CType  `json:",omitempty"`
	Params   []Param `json:",omitempty"`
	Variadic bool    `json:",omitempty"`
}

// Param is one function parameter.
type Param struct {
	Name string `json:",omitempty"`
	Type *CType `json:",omitempty"`
}

// Func is one function the header declares.
type Func struct {
	Symbol   string     `json:",omitempty"` // exported symbol that is called (cuMemAlloc_v2)
	Public   string     `json:",omitempty"` // spelling in the header source (cuMemAlloc)
	GoName   string     `json:",omitempty"` // Go name
	Settings []string   `json:",omitempty"` // settings that declare it
	Sig      *Signature `json:",omitempty"`
	Pos      string     `json:",omitempty"`
	Since    string     `json:"-"` // first header set declaring Symbol (from the snapshots)
}

// DeclKind classifies a TypeDecl.
type DeclKind int

// TypeDecl kinds.
const (
	DeclTypedef DeclKind = iota // typedef Name Underlying
	DeclStruct                  // a struct definition
	DeclUnion                   // a union definition
	DeclEnum                    // an enum definition
)

// TypeDecl is a type the header declares.
type TypeDecl struct {
	Kind       DeclKind      `json:",omitempty"`
	CName      string        `json:",omitempty"` // typedef name, or tag ("CUstreamMemOpWaitValueParams_st"), or generated name
	CSpell     string        `json:",omitempty"` // how C code names it: "ncclConfig_t", "struct CUstream_st", "union CUx_union"
	GoName     string        `json:",omitempty"`
	Underlying *CType        `json:",omitempty"` // DeclTypedef
	Size       int64         `json:",omitempty"`
	Align      int64         `json:",omitempty"`
	Fields     []*FieldDecl  `json:",omitempty"` // struct, union
	Values     []*Enumerator `json:",omitempty"` // enum
	Unsigned   bool          `json:",omitempty"` // enum: some value needs an unsigned type
	Pos        string        `json:",omitempty"`
	Anonymous  bool          `json:",omitempty"` // struct/union/enum without tag
	Handle     bool          `json:",omitempty"` // typedef of a pointer to an incomplete struct (an opaque handle)
	Alias      bool          `json:",omitempty"` // typedef whose Underlying is another declared typedef
	ParentDecl *TypeDecl     `json:"-"`          // anonymous nested aggregate: the aggregate it is declared in
	Parent     string        `json:",omitempty"` // ParentDecl's declKey, in the JSON model
	FieldName  string        `json:",omitempty"` // anonymous nested aggregate: the field it is the type of ("" for an anonymous member)
	Order      int           `json:",omitempty"` // declaration order in the header
}

// FieldDecl is one member of a struct or union.
type FieldDecl struct {
	Name   string `json:",omitempty"` // "" for an anonymous member
	GoName string `json:",omitempty"`
	Type   *CType `json:",omitempty"`
	Offset int64  `json:",omitempty"`
	Size   int64  `json:",omitempty"`
	Align  int64  `json:",omitempty"`
}

// Enumerator is one enum constant.
type Enumerator struct {
	Name   string `json:",omitempty"`
	GoName string `json:",omitempty"`
	Value  int64  `json:",omitempty"`
	Enum   string `json:",omitempty"` // CName of its enum type (the typedef name if there is one)
	Pos    string `json:",omitempty"`
}

// ConstKind classifies a Const.
type ConstKind int

// Const kinds.
const (
	ConstInt ConstKind = iota
	ConstUint
	ConstFloat
	ConstString
	ConstPointer // a pointer-typed macro; Type names its typedef or is "" for void*
)

// Const is a valued object-like macro.
type Const struct {
	Name   string    `json:",omitempty"`
	GoName string    `json:",omitempty"`
	Kind   ConstKind `json:",omitempty"`
	Int    int64     `json:",omitempty"`
	Uint   uint64    `json:",omitempty"`
	Float  float64   `json:",omitempty"`
	Str    string    `json:",omitempty"`
	Type   string    `json:",omitempty"` // ConstPointer: C typedef name of the pointer type ("CUstream"), or ""
	// Enumerator marks an enumerator of an enum without tag or typedef, kept as an
	// untyped constant (parse_anonenum.go).
	Enumerator bool   `json:",omitempty"`
	Pos        string `json:",omitempty"`
}

// API is everything one header set declares, after the skip list.
type API struct {
	Set      string
	Header   string
	Extra    []string // ExtraHeaders included in this set, in order
	Funcs    []*Func
	Types    []*TypeDecl
	Enums    []*Enumerator
	Consts   []*Const
	Globals  []*GlobalAddr // macros standing for the address of a library global
	External []*TypeDecl   // typedefs from our stub headers that the header uses (cudaStream_t)
	Defines  []*Define     // definitions of the config's macroDefinitions and the macros they use
	Counts   Counts
}

// Counts is the summary: what was found and what became of it, per kind.
type Counts map[string]*Count

// Count is one line of the summary.
type Count struct {
	Found   int            `json:",omitempty"`
	Emitted int            `json:",omitempty"`
	Skipped map[string]int `json:",omitempty"` // reason -> count
}

func (c Counts) add(kind string) *Count {
	n := c[kind]
	if n == nil {
		n = &Count{Skipped: map[string]int{}}
		c[kind] = n
	}
	n.Found++
	return n
}

func (c Counts) emit(kind string) { c.add(kind).Emitted++ }

func (c Counts) skip(kind, reason string) { c.add(kind).Skipped[reason]++ }
