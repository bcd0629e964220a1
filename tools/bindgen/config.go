package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// Config is one generated package: which header, which header sets, which settings, the
// naming prefixes and the skip list. It is read from a JSON file in gen/.
type Config struct {
	Package  string    `json:"package"`  // Go package name
	Out      string    `json:"out"`      // output folder, relative to the repository root
	Header   string    `json:"header"`   // header file name inside each header set
	Result   string    `json:"result"`   // the C result type that Go returns as an error
	Sets     []string  `json:"sets"`     // header sets, oldest first; the last is the generation target
	Include  []string  `json:"include"`  // extra include folders (our stubs), relative to the root
	Settings []Setting `json:"settings"` // preprocessor settings; the API is the union of all
	Prefixes []string  `json:"prefixes"` // prefixes dropped from C names, longest match first
	Skip     []Skip    `json:"skip"`     // declarations left out on purpose, each with a reason
	Rename   []Rename  `json:"rename"`   // Go names chosen by hand to resolve collisions, each with a reason

	// Batch lists the functions a Batch records and runs in one crossing (emit_batch.go).
	Batch *BatchConfig `json:"batch"`

	file string
	skip []*regexp.Regexp
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
	for i, r := range c.Rename {
		if r.C == "" || r.Go == "" || r.Reason == "" {
			return fmt.Errorf("rename entry %d (%q -> %q) needs c, go and a reason", i, r.C, r.Go)
		}
	}
	return nil
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
