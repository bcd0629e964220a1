package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Config is one generated package: which header, which header sets, which settings, the
// naming prefixes and the skip list. It is read from a JSON file in gen/.
type Config struct {
	Package string `json:"package"` // Go package name
	Out     string `json:"out"`     // output folder, relative to the repository root
	Header  string `json:"header"`  // header file name inside each header set
	Result  string `json:"result"`  // the C result type that Go returns as an error
	// ResultType is the Go type that a result of a C scalar type ("result": "int", MPI's
	// error codes) is converted to before resultError (declared in zerrors.go with errors,
	// else by hand in the package); a typedef result is its own generated type.
	ResultType string    `json:"resultType"`
	Sets       []string  `json:"sets"`     // header sets, oldest first; the last is the generation target
	Include    []string  `json:"include"`  // extra include folders (our stubs), relative to the root
	Settings   []Setting `json:"settings"` // preprocessor settings; the API is the union of all
	Prefixes   []string  `json:"prefixes"` // prefixes dropped from C names, longest match first
	Skip       []Skip    `json:"skip"`     // declarations left out on purpose, each with a reason
	Rename     []Rename  `json:"rename"`   // Go names chosen by hand to resolve collisions, each with a reason

	// Library says how the generated package finds its shared library (zload.go). Nil: the
	// package declares `var lib = &dl.Library{...}` itself (see tools/bindgen/README.md).
	Library *LibraryConfig `json:"library"`
	// Errors says how a Result becomes an error (zerrors.go). Nil: the package declares
	// `func resultError(r Result) error` itself.
	Errors *ErrorsConfig `json:"errors"`
	// Headers says where the header sets are and where they are pinned.
	Headers HeadersConfig `json:"headers"`
	// CPrefix starts every C name the generator invents in cgo preambles (trampolines,
	// tags of anonymous types); default "_<package>_".
	CPrefix string `json:"cPrefix"`
	// SetVersion is a regular expression with one group that takes the version out of a
	// header set name ("^nccl-(.+)$"); default: the text after the last "-".
	SetVersion string `json:"setVersion"`
	// Tables asks for tables of facts the generator knows (emit_tables.go): struct field
	// tables with the first version of each field, names of enum values.
	Tables *TablesConfig `json:"tables"`
	// DocExamples are C names shown in the package doc's naming table; default: the
	// first few functions, types, enumerators and macros.
	DocExamples []string `json:"docExamples"`
	// SpellingMacros are function-like macros F(x) of the header that spell a symbol name
	// as x followed by a suffix (cuda.h: __CUDA_API_PTDS(x) is x_ptds): macro -> suffix.
	SpellingMacros map[string]string `json:"spellingMacros"`
	// SymbolSuffixes are suffixes a setting adds to the symbol a spelling names (cuda.h's
	// per-thread-stream "_ptds", "_ptsz"): such a function's Go name gets the suffix in
	// camel case (MemcpyHtoDPtds), so both forms are callable.
	SymbolSuffixes []string `json:"symbolSuffixes"`
	// StrictEnv names an environment variable: when it is non-empty, a layout test whose
	// header is not cached fails instead of skipping (unless the header cannot be fetched
	// where the test runs, see HeadersConfig.Manifest).
	StrictEnv string `json:"strictEnv"`

	// Batch lists the functions a Batch records and runs in one crossing (emit_batch.go).
	Batch *BatchConfig `json:"batch"`

	// Unchecked are void * parameters passed to C without cgo's pointer check (unchecked.go).
	Unchecked []UncheckedPointers `json:"uncheckedPointers"`

	// MacroDefinitions are macros whose definitions (parameters and body) the snapshots
	// record, with those of every macro of the header they use (parse_defs.go).
	MacroDefinitions []string `json:"macroDefinitions"`

	// ExtraHeaders are more headers of a set whose declarations are bound too, included
	// after Header in this order (parse_extra.go). One found in an Include folder is our
	// prelude, included when a set has any of the others; one of the set
	// ("nccl_device/core.h") is included in the sets whose manifest lines pin a file ending
	// in it. With them, every file of the set's folder counts as the header's.
	ExtraHeaders []string `json:"extraHeaders"`
	// Handles are typedefs of a pointer to a struct that stay opaque handles (a named
	// uintptr) although a header defines the struct's members (for device code).
	Handles []Handle `json:"handles"`

	file    string
	skip    []*regexp.Regexp
	version *regexp.Regexp
}

// LibraryConfig is the shared library of a generated package: what dl.Library gets.
type LibraryConfig struct {
	Name      string   `json:"name"`      // display name: "NCCL"
	Driver    bool     `json:"driver"`    // a driver: missing symbols read "not in this driver"
	Env       string   `json:"env"`       // environment variable with an explicit file path
	Sonames   []string `json:"sonames"`   // file names, tried through the loader's search first
	WheelDirs []string `json:"wheelDirs"` // folders under Python site-packages that may hold it
	HomeEnvs  []string `json:"homeEnvs"`  // variables naming an install prefix (lib64, lib)
	// VersionSymbol is int f(int *) storing the library's version code; "" for none.
	VersionSymbol string `json:"versionSymbol"`
	// VersionFormats turn a version code into text, the first whose From the code
	// reaches wins; each gives the divisors of dl.FormatVersion.
	VersionFormats []VersionFormat `json:"versionFormats"`
	// VersionName starts the version text ("CUDA" 12.2); default Name.
	VersionName string `json:"versionName"`
	// VersionExample is a version code shown in the doc comments (22907).
	VersionExample int `json:"versionExample"`
	// Doc is more of lib's doc comment: what to know about the library (which
	// implementation the header binds, ...).
	Doc string `json:"doc"`
}

// VersionFormat is one rule of LibraryConfig.VersionFormats.
type VersionFormat struct {
	From     int   `json:"from"`
	Divisors []int `json:"divisors"`
}

// ErrorsConfig says how the result type becomes a Go error.
type ErrorsConfig struct {
	// Success is the enumerator (or macro, for a scalar result) meaning success; default:
	// the enumerator of the result type whose value is 0.
	Success string `json:"success"`
	// Message are functions describing a result, joined with ": " in Error():
	// `const char *f(R)` or `R f(R, const char **)`. Without them, or when none answers,
	// the message is "<package>: <Number> <code>".
	Message []string `json:"message"`
	// Number is the word before the code in the message of a result nothing describes;
	// default: the C result type.
	Number string `json:"number"`
	// Detail is `const char *f(H)` called with a zero H right after a failure; with it the
	// error is an *Error{Result, Detail}, without it the Result itself.
	Detail string `json:"detail"`
	// NoDetail are results for which Detail is not read (e.g. an in-progress result).
	NoDetail []string `json:"noDetail"`
	// Buffer is the macro giving the length of the text buffer of a message function of
	// the form `R f(R, char *buf, int *len)` (MPI_Error_string and MPI_MAX_ERROR_STRING).
	Buffer string `json:"buffer"`
	// Doc is the doc comment of the result type when the generator declares it (a
	// scalar result: resultType); default: a sentence from the config.
	Doc string `json:"doc"`
}

// HeadersConfig is where the header sets live: Dir (with "{set}" replaced by the set
// name) under the cache (when CacheEnv or CacheName is set: $CacheEnv, else
// $XDG_CACHE_HOME/CacheName, else ~/.cache/CacheName), or under the root.
type HeadersConfig struct {
	Dir       string `json:"dir"`
	CacheEnv  string `json:"cacheEnv"`
	CacheName string `json:"cacheName"`
	// Manifest is a table of pinned sets, relative to the root ("headers/manifest.tsv"):
	// lines "header<TAB>set<TAB>...". When set, every set must be pinned there.
	Manifest string `json:"manifest"`
	// OptionalSources are values of the manifest's 4th column (where a set comes from)
	// whose headers a strict run may lack: hosts it cannot reach ("github", "pypi").
	OptionalSources []string `json:"optionalSources"`
	// Fetch is the command that fetches (and pins) header sets, named in messages.
	Fetch string `json:"fetch"`
	// Snapshots is the folder of the API snapshots and models, relative to the root;
	// default "gen/snapshot".
	Snapshots string `json:"snapshots"`
}

// Setting is one way of preprocessing the header.
type Setting struct {
	Name    string   `json:"name"`
	Defines []string `json:"defines"`
}

// Rename gives the declaration with C name C (a typedef, tag, function spelling,
// enumerator or macro) the Go name Go instead of the one the naming rule gives.
type Rename struct {
	C      string `json:"c"`
	Go     string `json:"go"`
	Reason string `json:"reason"`
}

// Handle keeps the typedef C (a pointer to a struct) an opaque handle, with a reason.
type Handle struct {
	C      string `json:"c"`
	Reason string `json:"reason"`
}

// handle reports whether the typedef name stays an opaque handle.
func (c *Config) handle(name string) bool {
	for _, h := range c.Handles {
		if h.C == name {
			return true
		}
	}
	return false
}

// Skip leaves out the declarations of one kind whose C name matches a regular expression.
type Skip struct {
	Kind   string `json:"kind"` // function, macro, type, enumerator, variable
	Match  string `json:"match"`
	Reason string `json:"reason"`
}

var skipKinds = map[string]bool{"function": true, "macro": true, "type": true, "enumerator": true, "variable": true}

func loadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c := &Config{file: path}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (c *Config) validate() error {
	switch {
	case c.Package == "":
		return fmt.Errorf("package is empty")
	case c.Out == "" || filepath.IsAbs(c.Out):
		return fmt.Errorf("out %q must be a relative folder", c.Out)
	case c.Header == "":
		return fmt.Errorf("header is empty")
	case c.Result == "":
		return fmt.Errorf("result is empty")
	case len(c.Sets) == 0:
		return fmt.Errorf("sets is empty")
	case len(c.Settings) == 0:
		return fmt.Errorf("settings is empty")
	case scalarGo[c.Result] != "" && c.ResultType == "":
		return fmt.Errorf("result %s is a C scalar type: set resultType to the Go type of its values", c.Result)
	}
	for i, s := range c.Skip {
		if !skipKinds[s.Kind] {
			return fmt.Errorf("skip entry %d (%q): unknown kind %q", i, s.Match, s.Kind)
		}
		if s.Reason == "" {
			return fmt.Errorf("skip entry %d (%s %q) has no reason", i, s.Kind, s.Match)
		}
		re, err := regexp.Compile(s.Match)
		if err != nil {
			return fmt.Errorf("skip entry %d: %w", i, err)
		}
		c.skip = append(c.skip, re)
	}
	if c.Headers.Dir == "" {
		c.Headers.Dir = "{set}"
	}
	if c.Headers.Snapshots == "" {
		c.Headers.Snapshots = filepath.Join("gen", "snapshot")
	}
	if c.CPrefix == "" {
		c.CPrefix = "_" + c.Package + "_"
	}
	if c.SetVersion != "" {
		re, err := regexp.Compile(c.SetVersion)
		if err != nil || re.NumSubexp() != 1 {
			return fmt.Errorf("setVersion %q must be a regular expression with one group", c.SetVersion)
		}
		c.version = re
	}
	if l := c.Library; l != nil {
		if l.Name == "" || len(l.Sonames) == 0 {
			return fmt.Errorf("library needs a name and at least one soname")
		}
		for _, f := range l.VersionFormats {
			if len(f.Divisors) == 0 {
				return fmt.Errorf("library version format from %d has no divisors", f.From)
			}
		}
	}
	for i, r := range c.Rename {
		if r.C == "" || r.Go == "" || r.Reason == "" {
			return fmt.Errorf("rename entry %d (%q -> %q) needs c, go and a reason", i, r.C, r.Go)
		}
	}
	return c.compileUnchecked()
}

// renamed returns the Go name chosen by hand for a C name, or "".
func (c *Config) renamed(cname string) string {
	for _, r := range c.Rename {
		if r.C == cname {
			return r.Go
		}
	}
	return ""
}

// goName applies the rename list, then the naming rule.
func (c *Config) goName(cname string) string {
	if n := c.renamed(cname); n != "" {
		return n
	}
	return goName(cname, c.Prefixes)
}

// setVersion is the version part of a header set name: nccl-2.22.3 -> 2.22.3.
func (c *Config) setVersion(set string) string {
	if c.version != nil {
		if m := c.version.FindStringSubmatch(set); m != nil {
			return m[1]
		}
		return set
	}
	return set[strings.LastIndex(set, "-")+1:]
}

// headerDir is the folder of one header set.
func (c *Config) headerDir(root, cache, set string) string {
	base := root
	if cache != "" {
		base = cache
	} else if c.Headers.CacheEnv != "" || c.Headers.CacheName != "" {
		base = c.cacheBase()
	}
	return filepath.Join(base, strings.ReplaceAll(c.Headers.Dir, "{set}", set))
}

// cacheBase is the cache folder of HeadersConfig: $CacheEnv, else
// $XDG_CACHE_HOME/CacheName, else ~/.cache/CacheName.
func (c *Config) cacheBase() string {
	if c.Headers.CacheEnv != "" {
		if d := os.Getenv(c.Headers.CacheEnv); d != "" {
			return d
		}
	}
	name := c.Headers.CacheName
	if name == "" {
		name = c.Package
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, name)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", name)
	}
	return filepath.Join(home, ".cache", name)
}

// fetchHint is the advice given when a header set is missing.
func (c *Config) fetchHint() string {
	if c.Headers.Fetch != "" {
		return "run " + c.Headers.Fetch
	}
	return "put " + c.Header + " there"
}

// Target is the header set the Go code is generated from.
func (c *Config) Target() string { return c.Sets[len(c.Sets)-1] }

// skipped reports the reason a declaration is left out, or "".
func (c *Config) skipped(kind, name string) string {
	for i, s := range c.Skip {
		if s.Kind == kind && c.skip[i].MatchString(name) {
			return s.Reason
		}
	}
	return ""
}
