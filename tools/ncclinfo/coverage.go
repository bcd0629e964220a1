package main

import (
	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// symbolState is one C function a raw package binds, as the package reports it.
type symbolState struct {
	symbol, since string
	present       bool
}

// symbolTables returns, per raw package, the loaded library's version text and the
// state of every function the package binds, or an error saying why it cannot.
var symbolTables = []struct {
	pkg   string
	table func() (library string, syms []symbolState, err error)
}{
	{"raw/nccl", func() (string, []symbolState, error) {
		return table(nccl.LibraryInfo().Version, nccl.Coverage)
	}},
	{"raw/cuda", func() (string, []symbolState, error) {
		return table(cuda.LibraryInfo().Version, cuda.Coverage)
	}},
}

// table converts a raw package's Coverage into symbol states.
func table(version string, cov func() ([]dlStatus, error)) (string, []symbolState, error) {
	list, err := cov()
	if err != nil {
		return "", nil, err
	}
	out := make([]symbolState, len(list))
	for i, s := range list {
		out[i] = symbolState{symbol: s.Symbol, since: s.Since, present: s.Present}
	}
	return version, out, nil
}

// dlStatus is the element type both raw packages' Coverage return.
type dlStatus = nccl.SymbolStatus

// coverage reports each raw package's functions against the loaded library.
func coverage() []Coverage {
	out := make([]Coverage, 0, len(symbolTables))
	for _, st := range symbolTables {
		lib, syms, err := st.table()
		out = append(out, summarize(st.pkg, lib, syms, err))
	}
	return out
}

// summarize counts present and missing functions.
func summarize(pkg, library string, syms []symbolState, err error) Coverage {
	c := Coverage{Package: pkg, Library: library, Missing: []Missing{}}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	c.Functions = len(syms)
	for _, s := range syms {
		if s.present {
			c.Present++
		} else {
			c.Missing = append(c.Missing, Missing{Symbol: s.symbol, Since: s.since})
		}
	}
	return c
}
