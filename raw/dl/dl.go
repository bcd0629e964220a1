// Package dl is the run-time support of the packages tools/bindgen generates (raw/nccl,
// raw/cuda here, and any package another module generates with bindgen): it opens a shared
// library at run time and resolves its symbols lazily. Generated code imports it as
// github.com/ncclgo/ncclgo/raw/dl, so bindgen's output builds in any module.
//
// A [Library] describes where its file may be found. The library is opened on first use,
// following one search order (see [Library.Load]); each [Symbol] is looked up with dlsym
// on its first call and cached, so the steady-state cost of [Library.Resolve] is one atomic
// load. A missing library or symbol is an ordinary error ([ErrLibraryNotFound],
// [ErrSymbolNotFound], [*SymbolError]); nothing here panics or lets the dynamic loader
// abort the process.
//
// Without cgo, or on a system without dlopen, every call returns [ErrNeedsCgo].
//
// # Stability
//
// Everything exported here is the contract between generated code and this package and
// follows the module's semantic version: names are only added, never changed or removed,
// within a major version. Generated code uses [Library], [Symbol], [Library.Resolve],
// [Library.Loaded], [FormatVersion], [GoString] and the error values; the rest
// ([Library.Info], [Library.Coverage], [LoadInfo]...) serves the functions a generated
// package exports about its library.
package dl

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrLibraryNotFound is matched (errors.Is) by the error returned when no candidate file
// of a library could be loaded; the error itself is a [*LoadError] listing every attempt.
var ErrLibraryNotFound = errors.New("library not found")

// ErrSymbolNotFound is matched (errors.Is) by a [*SymbolError]: the library is loaded but
// does not export the symbol, usually because it is older than the header that declares it.
var ErrSymbolNotFound = errors.New("symbol not found")

// ErrNeedsCgo is returned by every call of a binary built without cgo (CGO_ENABLED=0)
// or for a system without dlopen: types and constants work, calls into the library do not.
var ErrNeedsCgo = errors.New("calling into a shared library needs cgo: this binary was built with CGO_ENABLED=0")

// ErrAlreadyLoaded is returned by [Library.SetPath] once the library has been loaded.
var ErrAlreadyLoaded = errors.New("library already loaded")

// Symbol is one function of a library, looked up on first use and then cached.
// The generated packages declare one package-level Symbol per C function.
type Symbol struct {
	// Name is the exported C symbol, e.g. "ncclAllReduce" or "cuMemAlloc_v2".
	Name string
	// Since is the first pinned header version that declares the symbol, e.g. "2.22.3".
	Since string

	p atomic.Uintptr
}

// Library describes one shared library and where to look for it. Declare it once at
// package level (it must not be copied after first use); the zero values of the search
// fields skip that step of the search.
type Library struct {
	// Name is the display name: "NCCL", "CUDA driver".
	Name string
	// Header is the C header whose pinned versions appear in Symbol.Since: "nccl.h".
	Header string
	// Driver says the library is a driver: a missing symbol is reported as
	// "not in this driver" rather than as "needs <Name> ≥ <Since>".
	Driver bool
	// Env names the environment variable holding an explicit file path: "NCCLGO_LIBNCCL".
	Env string
	// Sonames are the file names to look for, first the loader's own search: "libnccl.so.2".
	Sonames []string
	// WheelDirs are folders under a Python site-packages folder that may hold the
	// library (pip wheels): "nvidia/nccl/lib".
	WheelDirs []string
	// HomeEnvs name environment variables holding an installation prefix whose lib64
	// and lib folders may hold the library: "NCCL_HOME", "CUDA_HOME".
	HomeEnvs []string
	// VersionSymbol is a function of C type int (*)(int *) that stores the library's
	// version code and returns 0 on success: "ncclGetVersion", "cuDriverGetVersion".
	VersionSymbol string
	// FormatVersion turns a version code into the text used in messages and LoadInfo,
	// e.g. 22907 -> "NCCL 2.29.7". Nil prints the code.
	FormatVersion func(code int) string

	mu       sync.Mutex
	notFound struct {
		once sync.Once
		err  error
	} // NotFound's error
	path  string                 // set by SetPath; guarded by mu
	state atomic.Pointer[loaded] // nil until the first load attempt
}

// loaded is the outcome of one load attempt; immutable once published.
type loaded struct {
	handle      uintptr // 0 when the load failed
	info        LoadInfo
	versionCode int
}

// Attempt is one candidate file tried while loading a library.
type Attempt struct {
	// Source says why the file was tried: "NCCLGO_LIBNCCL", "SetLibraryPath", "soname",
	// "VIRTUAL_ENV", "CONDA_PREFIX", "python3 /usr/bin/python3", "NCCL_HOME", ...
	Source string
	// Path is the file (or soname) handed to the loader.
	Path string
	// Err is the loader's message when the attempt failed; nil for the attempt that loaded.
	Err error
}

// LoadInfo tells which file of a library was loaded, how it was found and what was
// tried before it.
type LoadInfo struct {
	// Library is the display name, e.g. "NCCL".
	Library string
	// Path is the file that was loaded (resolved by the loader); empty when none was.
	Path string
	// Source is how Path was found (the Source of the successful attempt).
	Source string
	// Version is the library's version text, e.g. "NCCL 2.29.7"; empty when unknown.
	Version string
	// VersionCode is the library's version code, e.g. 22907; 0 when unknown.
	VersionCode int
	// Attempts lists every candidate in search order, up to and including the one loaded.
	Attempts []Attempt
	// Err is the load error, nil on success.
	Err error
}

// LoadError is the error of a library that could not be loaded. It matches
// [ErrLibraryNotFound] with errors.Is.
type LoadError struct {
	// Library is the display name, e.g. "NCCL".
	Library string
	// Attempts lists every candidate tried, with the loader's message.
	Attempts []Attempt

	notFound error // the library's NotFound error
}

// Error lists the attempts with the loader's messages.
func (e *LoadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s library not found", e.Library)
	if len(e.Attempts) == 0 {
		b.WriteString(": no candidate file")
		return b.String()
	}
	b.WriteString(": tried ")
	for i, a := range e.Attempts {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%s): %v", a.Path, a.Source, a.Err)
	}
	return b.String()
}

// Is reports whether target is [ErrLibraryNotFound] or the NotFound error of the
// library that could not be loaded.
func (e *LoadError) Is(target error) bool {
	return target == ErrLibraryNotFound || (e.notFound != nil && target == e.notFound)
}

// NotFound returns the library's own not-found error, the same value on every call: a
// failed load of this library matches it (errors.Is), another library's does not, and
// it matches [ErrLibraryNotFound] itself. The generated packages export it as their
// ErrLibraryNotFound, so that a missing CUDA driver never matches NCCL's.
func (l *Library) NotFound() error {
	l.notFound.once.Do(func() { l.notFound.err = &notFoundError{library: l.Name} })
	return l.notFound.err
}

// notFoundError is a library's NotFound error.
type notFoundError struct{ library string }

func (e *notFoundError) Error() string        { return e.library + " library not found" }
func (e *notFoundError) Is(target error) bool { return target == ErrLibraryNotFound }

// SymbolError is the error of a symbol that the loaded library does not export.
// It matches [ErrSymbolNotFound] with errors.Is.
type SymbolError struct {
	// Symbol is the C symbol, e.g. "ncclCommSuspend".
	Symbol string
	// Library is the display name, e.g. "NCCL".
	Library string
	// Path is the loaded library file.
	Path string
	// Version is the loaded library's version text, e.g. "NCCL 2.22.3"; empty when unknown.
	Version string
	// Since is the first pinned header version that declares the symbol, e.g. "2.29.7".
	Since string
	// Header is the header named in driver messages, e.g. "cuda.h".
	Header string
	// Driver selects the "not in this driver" wording.
	Driver bool
}

// Error names the symbol, the loaded file and its version, and the version that has it.
func (e *SymbolError) Error() string {
	version := e.Version
	if version == "" {
		version = "unknown version"
	}
	msg := fmt.Sprintf("symbol %s not found in %s", e.Symbol, e.Path)
	switch {
	case e.Driver:
		msg += fmt.Sprintf(": not in this driver (%s)", version)
		if e.Since != "" {
			msg += fmt.Sprintf("; declared by %s %s", e.Header, e.Since)
		}
	case e.Since != "":
		msg += fmt.Sprintf(" (%s): needs %s ≥ %s", version, e.Library, e.Since)
	default:
		msg += fmt.Sprintf(" (%s)", version)
	}
	return msg
}

// Is reports whether target is [ErrSymbolNotFound].
func (e *SymbolError) Is(target error) bool { return target == ErrSymbolNotFound }

// Resolve returns the address of s in l, opening l on first use. After the first
// successful call for s it costs one atomic load and allocates nothing.
//
// s must not be nil (the generated packages pass the address of a package-level Symbol).
// The body stays within the compiler's inlining budget: keep it this shape.
func (l *Library) Resolve(s *Symbol) (p uintptr, err error) {
	if p = s.p.Load(); p == 0 {
		p, err = l.resolve(s)
	}
	return
}

// resolve is the slow path of Resolve: open the library, dlsym, cache.
func (l *Library) resolve(s *Symbol) (uintptr, error) {
	if l == nil || s == nil || s.Name == "" {
		return 0, errors.New("dl: resolve needs a library and a named symbol")
	}
	st := l.load()
	if st.info.Err != nil {
		return 0, st.info.Err
	}
	p, err := dlsym(st.handle, s.Name)
	if err != nil {
		return 0, &SymbolError{
			Symbol:  s.Name,
			Library: l.Name,
			Path:    st.info.Path,
			Version: st.info.Version,
			Since:   s.Since,
			Header:  l.Header,
			Driver:  l.Driver,
		}
	}
	s.p.Store(p)
	return p, nil
}

// Load opens the library if no attempt was made yet and returns the load error, if any.
//
// Search order, first success wins:
//  1. an explicit path: the one given to SetPath, else the Env variable. When one is
//     given it is the only candidate: a wrong explicit path is an error, never a silent
//     fallback to another file;
//  2. each soname through the dynamic loader's own search (LD_LIBRARY_PATH, the
//     ld.so cache, the system folders);
//  3. Python wheel folders (each WheelDir under site-packages) of $VIRTUAL_ENV, then
//     $CONDA_PREFIX, then the python3 found on $PATH, then the user's and the system's
//     site-packages and dist-packages (found by globbing, without running Python);
//  4. the lib64 and lib folders of each HomeEnvs variable.
//
// A failed load is remembered: later calls return the same error without searching
// again, until SetPath is called.
func (l *Library) Load() error {
	if l == nil {
		return errors.New("dl: nil library")
	}
	return l.load().info.Err
}

// Loaded reports whether the library has been loaded successfully. It never loads it.
func (l *Library) Loaded() bool {
	if l == nil {
		return false
	}
	st := l.state.Load()
	return st != nil && st.handle != 0
}

// Info loads the library if no attempt was made yet and describes the outcome.
// The returned value is a copy the caller may keep.
func (l *Library) Info() LoadInfo {
	if l == nil {
		return LoadInfo{Err: errors.New("dl: nil library")}
	}
	info := l.load().info
	info.Attempts = append([]Attempt(nil), info.Attempts...)
	return info
}

// Version loads the library if needed and returns its version code (e.g. 22907).
func (l *Library) Version() (int, error) {
	if l == nil {
		return 0, errors.New("dl: nil library")
	}
	st := l.load()
	if st.info.Err != nil {
		return 0, st.info.Err
	}
	if st.versionCode == 0 {
		return 0, fmt.Errorf("%s version unknown: %s did not answer in %s", l.Name, l.VersionSymbol, st.info.Path)
	}
	return st.versionCode, nil
}

// SetPath makes path the only candidate file of the library, ahead of the Env variable.
// It must be called before the library is first used: once the library is loaded it
// returns an error matching [ErrAlreadyLoaded] (unless path is the one loaded). After a
// failed load, SetPath clears the failure so the next call tries path.
func (l *Library) SetPath(path string) error {
	if l == nil {
		return errors.New("dl: nil library")
	}
	if path == "" {
		return fmt.Errorf("%s library path is empty", l.Name)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.state.Load(); st != nil && st.handle != 0 {
		if path == st.info.Path || path == st.info.Attempts[len(st.info.Attempts)-1].Path {
			return nil
		}
		return fmt.Errorf("cannot set %s library path to %q: %w from %s", l.Name, path, ErrAlreadyLoaded, st.info.Path)
	}
	l.path = path
	l.state.Store(nil)
	return nil
}

// load returns the outcome of the (single) load attempt, making it if needed.
func (l *Library) load() *loaded {
	if st := l.state.Load(); st != nil {
		return st
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.state.Load(); st != nil {
		return st
	}
	st := l.search(l.path)
	l.state.Store(st)
	return st
}

// search tries the candidates in order and returns the first that loads.
func (l *Library) search(explicit string) *loaded {
	st := &loaded{info: LoadInfo{Library: l.Name}}
	if !haveDL {
		st.info.Err = ErrNeedsCgo
		return st
	}
	for _, c := range l.candidates(explicit, osEnv{}) {
		h, path, err := dlopen(c.Path)
		st.info.Attempts = append(st.info.Attempts, Attempt{Source: c.Source, Path: c.Path, Err: err})
		if err != nil {
			continue
		}
		st.handle = h
		st.info.Path = path
		st.info.Source = c.Source
		l.readVersion(st)
		slog.Debug("ncclgo: library loaded", "library", l.Name, "path", path, "source", c.Source,
			"version", st.info.Version, "attempts", len(st.info.Attempts))
		return st
	}
	st.info.Err = &LoadError{Library: l.Name, Attempts: st.info.Attempts, notFound: l.NotFound()}
	slog.Debug("ncclgo: library not loaded", "library", l.Name, "error", st.info.Err)
	return st
}

// readVersion asks the freshly opened library for its version code.
func (l *Library) readVersion(st *loaded) {
	if l.VersionSymbol == "" {
		return
	}
	fp, err := dlsym(st.handle, l.VersionSymbol)
	if err != nil {
		return
	}
	code, ok := callVersion(fp)
	if !ok || code <= 0 {
		return
	}
	st.versionCode = code
	if l.FormatVersion != nil {
		st.info.Version = l.FormatVersion(code)
	} else {
		st.info.Version = fmt.Sprint(code)
	}
	st.info.VersionCode = code
}
