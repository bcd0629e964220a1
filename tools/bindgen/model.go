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
	Kind  Kind
	Name  string
	Const bool
	Elem  *CType
	Len   int64
	Sig   *Signature
	Size  int64
	Align int64
}

// Signature is a function prototype.
type Signature struct {
	Result   *CType
	Params   []Param
	Variadic bool
}

// Param is one function parameter.
type Param struct {
	Name string
	Type *CType
}

// Func is one function the header declares.
type Func struct {
	Symbol   string   // exported symbol that is called (cuMemAlloc_v2)
	Public   string   // spelling in the header source (cuMemAlloc)
	GoName   string   // Go name
	Settings []string // settings that declare it
	Sig      *Signature
	Pos      string
	Since    string // first header set declaring Symbol
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
	Kind       DeclKind
	CName      string // typedef name, or tag ("CUstreamMemOpWaitValueParams_st"), or generated name
	CSpell     string // how C code names it: "ncclConfig_t", "struct CUstream_st", "union CUx_union"
	GoName     string
	Underlying *CType // DeclTypedef
	Size       int64
	Align      int64
	Fields     []*FieldDecl  // struct, union
	Values     []*Enumerator // enum
	Unsigned   bool          // enum: some value needs an unsigned type
	Pos        string
	Anonymous  bool      // struct/union/enum without tag
	Handle     bool      // typedef of a pointer to an incomplete struct (an opaque handle)
	Alias      bool      // typedef whose Underlying is another declared typedef
	ParentDecl *TypeDecl // anonymous nested aggregate: the aggregate it is declared in
	FieldName  string    // anonymous nested aggregate: the field it is the type of ("" for an anonymous member)
	Order      int       // declaration order in the header
}

// FieldDecl is one member of a struct or union.
type FieldDecl struct {
	Name   string // "" for an anonymous member
	GoName string
	Type   *CType
	Offset int64
	Size   int64
	Align  int64
}

// Enumerator is one enum constant.
type Enumerator struct {
	Name   string
	GoName string
	Value  int64
	Enum   string // CName of its enum type (the typedef name if there is one)
	Pos    string
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
	Name   string
	GoName string
	Kind   ConstKind
	Int    int64
	Uint   uint64
	Float  float64
	Str    string
	Type   string // ConstPointer: C typedef name of the pointer type ("CUstream"), or ""
	// Enumerator marks an enumerator of an enum without tag or typedef, kept as an
	// untyped constant (parse_anonenum.go).
	Enumerator bool
	Pos        string
}

// API is everything one header set declares, after the skip list.
type API struct {
	Set      string
	Header   string
	Funcs    []*Func
	Types    []*TypeDecl
	Enums    []*Enumerator
	Consts   []*Const
	Globals  []*GlobalAddr // macros standing for the address of a library global
	External []*TypeDecl   // typedefs from our stub headers that the header uses (cudaStream_t)
	Counts   Counts
}

// Counts is the summary: what was found and what became of it, per kind.
type Counts map[string]*Count

// Count is one line of the summary.
type Count struct {
	Found   int
	Emitted int
	Skipped map[string]int // reason -> count
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
