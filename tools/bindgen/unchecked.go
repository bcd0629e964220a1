package main

import (
	"fmt"
	"regexp"
	"sort"
)

// UncheckedPointers names untyped pointer parameters (void *, const void *) that the
// generated functions pass to C without cgo's run-time pointer check.
//
// cgo checks every unsafe.Pointer argument of a C call (GODEBUG=cgocheck=1, the
// default): it finds the Go object the pointer points into and fails when that memory
// holds Go pointers that are not pinned. On a call that only moves a data buffer the check
// is most of the Go-side cost (an MPI_Allreduce of 8 bytes on one rank: about a third of
// the call). For a matching parameter the Go argument becomes (*C.char)(unsafe.Pointer(p))
// and the trampoline takes char *: cgo does not check a pointer to a type that cannot hold
// pointers, and nothing else changes. The argument is still a pointer, so the garbage
// collector keeps the object alive for the whole call (the Go heap does not move), and a
// goroutine's stack is not moved while it is in a C call, so a pointer into it stays valid
// too (the trampolines are "#cgo noescape": such buffers may stay on the stack). What is
// lost is only the diagnosis of a caller who passes Go memory holding Go pointers: the
// parameter's doc comment says that the caller must not.
type UncheckedPointers struct {
	// Function and Param are regular expressions matching the C function's symbol and the
	// parameter's C name; both must match.
	Function string `json:"function"`
	Param    string `json:"param"`
	// Reason says why the parameters are plain data, never memory holding Go pointers.
	Reason string `json:"reason"`
	// Sentinels are pointer macros of the header (MPI_IN_PLACE, (void *)1) that the
	// parameters may take. One whose value lies in the null page cannot be held in
	// an unsafe.Pointer (Go's runtime aborts when it finds it on a stack it moves), so
	// each gets a Go variable of its own, the macro's Go name and "Ptr" (InPlacePtr):
	// the address of a C byte, which the trampoline turns into the macro's value.
	Sentinels []string `json:"sentinels,omitempty"`

	function, param *regexp.Regexp
	used            bool
}

// compileUnchecked checks and compiles the uncheckedPointers rules.
func (c *Config) compileUnchecked() error {
	for i := range c.Unchecked {
		u := &c.Unchecked[i]
		if u.Function == "" || u.Param == "" || u.Reason == "" {
			return fmt.Errorf("uncheckedPointers entry %d (%q, %q) needs function, param and a reason", i, u.Function, u.Param)
		}
		var err error
		if u.function, err = regexp.Compile(u.Function); err != nil {
			return fmt.Errorf("uncheckedPointers entry %d: function: %w", i, err)
		}
		if u.param, err = regexp.Compile(u.Param); err != nil {
			return fmt.Errorf("uncheckedPointers entry %d: param: %w", i, err)
		}
	}
	return nil
}

// unchecked returns the rule by which the untyped pointer parameter param of function
// symbol goes to C without cgo's pointer check (nil: none), and marks it as used.
func (c *Config) unchecked(symbol, param string) *UncheckedPointers {
	for i := range c.Unchecked {
		if u := &c.Unchecked[i]; u.function.MatchString(symbol) && u.param.MatchString(param) {
			u.used = true
			return u
		}
	}
	return nil
}

// sentinel is a pointer macro that unchecked parameters may take, as generated.
type sentinel struct {
	c     *Const
	goVar string // the Go variable standing for it (InPlacePtr)
	cFunc string // the C function returning the address that stands for it
}

// sentinels returns every sentinel the uncheckedPointers rules name, by macro, or an
// error naming one that is not a pointer macro of the header without a type.
func (g *goPkg) sentinels() (map[string]*sentinel, error) {
	out := map[string]*sentinel{}
	for i, u := range g.cfg.Unchecked {
		for _, name := range u.Sentinels {
			if out[name] != nil {
				continue
			}
			var c *Const
			for _, k := range g.api.Consts {
				if k.Name == name {
					c = k
				}
			}
			if c == nil || c.Kind != ConstPointer || c.Type != "" {
				return nil, fmt.Errorf("uncheckedPointers entry %d: sentinel %s is not a pointer macro (such as ((void *) 1)) of the header", i, name)
			}
			out[name] = &sentinel{c: c, goVar: c.GoName + "Ptr", cFunc: g.cfg.CPrefix + "sentinel_" + name}
		}
	}
	return out, nil
}

// sentinelNames returns the keys of m, sorted.
func sentinelNames(m map[string]*sentinel) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// unusedUnchecked returns an error naming the first rule that matched no parameter: a
// rule left over from an older header says nothing, so it is an error, as a stale skip.
func (c *Config) unusedUnchecked() error {
	for i, u := range c.Unchecked {
		if !u.used {
			return fmt.Errorf("uncheckedPointers entry %d (function %q, param %q) matches no void * parameter", i, u.Function, u.Param)
		}
	}
	return nil
}
