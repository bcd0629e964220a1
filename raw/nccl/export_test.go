package nccl

import "github.com/ncclgo/ncclgo/raw/dl"

// ExportSymbols is the generated symbol table, for the external tests.
var ExportSymbols = symbols

// ExportResolve resolves s in libnccl.
func ExportResolve(s *dl.Symbol) (uintptr, error) { return lib.Resolve(s) }
