package main

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
	{"raw/nccl", noTable("raw/nccl")},
	{"raw/cuda", noTable("raw/cuda")},
}

// noTable stands for a package that does not export its symbol table yet.
func noTable(pkg string) func() (string, []symbolState, error) {
	return func() (string, []symbolState, error) {
		return "", nil, errNoTable{pkg}
	}
}

type errNoTable struct{ pkg string }

func (e errNoTable) Error() string {
	return e.pkg + " does not export its symbol table in this version"
}

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
