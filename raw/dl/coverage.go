package dl

// SymbolStatus says whether the loaded library exports one function of a header.
type SymbolStatus struct {
	// Symbol is the exported C name (ncclCommShrink, cuMemAlloc_v2).
	Symbol string
	// Since is the first pinned header version that declares it.
	Since string
	// Present reports whether the loaded library exports it.
	Present bool
}

// Coverage loads l if needed and reports, for each symbol, whether l exports it. The
// error is the load error when the library could not be loaded (and the list is nil).
func (l *Library) Coverage(syms []*Symbol) ([]SymbolStatus, error) {
	if err := l.Load(); err != nil {
		return nil, err
	}
	out := make([]SymbolStatus, 0, len(syms))
	for _, s := range syms {
		if s == nil {
			continue
		}
		_, err := l.Resolve(s)
		out = append(out, SymbolStatus{Symbol: s.Name, Since: s.Since, Present: err == nil})
	}
	return out, nil
}
