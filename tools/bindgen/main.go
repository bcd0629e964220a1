// Command bindgen generates Go bindings of a C library from its header: every function,
// type and constant, called through cgo trampolines into a library opened at run time
// (package github.com/ncclgo/ncclgo/raw/dl), plus an API snapshot per header version.
// ncclgo generates raw/nccl, raw/cuda and raw/mpi (NVIDIA's and Open MPI's headers) with
// it; any module can generate its own package.
//
// Usage:
//
//	bindgen generate [-root DIR] [-cache DIR] CONFIG.json...   (also: bindgen CONFIG.json...)
//	bindgen diff OLD.txt NEW.txt
//	bindgen history [-root DIR] [-o FILE] CONFIG.json
//	bindgen help
//
// Each CONFIG (gen/nccl.json, gen/cuda.json; fields in tools/bindgen/README.md) names a
// header, its header sets, the preprocessor settings, the naming prefixes, the library to
// load and a skip list in which every entry has a reason.
//
// Stages: header -> parse (cc/v4, parse.go) -> API model (model.go), written to the
// snapshot folder as <set>.txt (for people and diff) and, for the generated set,
// <set>.api.json -> emit (jennifer, emit_*.go). The Go code is always emitted from the
// committed model, so it can be regenerated and checked where the header cannot be had.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dave/jennifer/jen"
)

// ErrNoHeaders means the header cache lacks a header set.
var ErrNoHeaders = errors.New("header cache is missing a header set")

// errUsage marks a command line that bindgen does not understand.
var errUsage = errors.New("usage")

const usage = `bindgen generates Go bindings of a C library from its header.

Usage:

  bindgen generate [-root DIR] [-cache DIR] CONFIG.json...
  bindgen CONFIG.json...                 same as generate (what go:generate runs)
      Parse the header sets of each config, write their API snapshots
      (<snapshots>/<set>.txt, and <set>.api.json for the generated set) and the Go
      package (out). A set whose header is not cached is read from its committed
      snapshot; the generated set then from its committed .api.json model.
      -root DIR   folder the config's paths are relative to (default: the folder
                  holding go.mod above the working directory)
      -cache DIR  folder holding the header sets (default: the config's
                  headers.cacheEnv / headers.cacheName rule, else -root)

  bindgen diff OLD.txt NEW.txt
      Print what changed between two API snapshots: functions, types (with layouts),
      enumerators and macros added, removed or changed.

  bindgen history [-root DIR] [-o FILE] CONFIG.json
      Write the API history of the config's header sets as a Markdown table (to FILE,
      default standard output): per set, the functions, types, enumerators and macros
      added, removed or changed since the set before it, from the committed snapshots.

  bindgen help
      Print this text.

The configuration fields are described in tools/bindgen/README.md.
`

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "bindgen:", err)
		fmt.Fprint(os.Stderr, "\n"+usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bindgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	case "diff":
		return runDiff(args[1:], stdout)
	case "generate":
		return runGenerate(args[1:], stdout)
	case "history":
		return runHistory(args[1:], stdout)
	}
	return runGenerate(args, stdout)
}

func runGenerate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bindgen generate", flag.ContinueOnError)
	root := fs.String("root", "", "")
	cache := fs.String("cache", "", "")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: generate needs at least one CONFIG.json", errUsage)
	}
	var err error
	if *root == "" {
		if *root, err = findRoot(); err != nil {
			return err
		}
	}
	start := time.Now()
	for _, path := range fs.Args() {
		cfg, err := loadConfig(path)
		if err != nil {
			return err
		}
		if err := generate(cfg, *root, *cache, stdout); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	fmt.Fprintf(stdout, "bindgen: done in %.2fs\n", time.Since(start).Seconds())
	return nil
}

func runDiff(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bindgen diff", flag.ContinueOnError)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if args = fs.Args(); len(args) != 2 {
		return fmt.Errorf("%w: diff needs two snapshots, OLD.txt NEW.txt", errUsage)
	}
	var snaps [2]map[string]*entity
	for i, p := range args {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		snaps[i], err = readSnapshot(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	diffSnapshots(stdout, args[0], args[1], snaps[0], snaps[1])
	return nil
}

func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s: pass -root", dir)
		}
	}
}

func joinErrors(errs []error) error {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// generate parses every header set of a config, writes the snapshots and the model of
// the target set, and emits the package from that model.
func generate(cfg *Config, root, cache string, stdout io.Writer) error {
	if err := checkManifest(cfg, root); err != nil {
		return err
	}
	apis := make([]*API, len(cfg.Sets))
	errs := make([]error, len(cfg.Sets))
	var wg sync.WaitGroup
	for i, set := range cfg.Sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			apis[i], errs[i] = parseSet(cfg, root, cache, set)
		}()
	}
	wg.Wait()
	multi := len(cfg.Settings) > 1
	snapDir := filepath.Join(root, cfg.Headers.Snapshots)
	snaps := make([]map[string]*entity, len(cfg.Sets))
	var notCached []string
	for i, set := range cfg.Sets {
		snapPath := filepath.Join(snapDir, set+".txt")
		if errs[i] != nil {
			if !errors.Is(errs[i], ErrNoHeaders) {
				return errs[i]
			}
			// A set whose header is not cached: use its committed snapshot.
			b, err := os.ReadFile(snapPath)
			if err != nil {
				return fmt.Errorf("%w, and it has no committed snapshot (%v)", errs[i], err)
			}
			if snaps[i], err = readSnapshot(bytes.NewReader(b)); err != nil {
				return fmt.Errorf("%s: %w", snapPath, err)
			}
			notCached = append(notCached, set)
			continue
		}
		b := writeSnapshot(apis[i], multi)
		if err := writeIfChanged(snapPath, b); err != nil {
			return err
		}
		var err error
		if snaps[i], err = readSnapshot(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("snapshot of %s does not read back: %w", set, err)
		}
	}
	if len(notCached) > 0 {
		fmt.Fprintf(stdout, "bindgen: not cached, read from their committed snapshots: %s\n", strings.Join(notCached, " "))
	}
	target := cfg.Target()
	modelPath := filepath.Join(snapDir, target+".api.json")
	// Only the generated set has a model: an older target's model goes.
	for _, set := range cfg.Sets[:len(cfg.Sets)-1] {
		if err := os.Remove(filepath.Join(snapDir, set+".api.json")); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	relModel, err := filepath.Rel(root, modelPath)
	if err != nil {
		relModel = modelPath
	}
	if api := apis[len(apis)-1]; api != nil {
		b, err := encodeModel(cfg, api)
		if err != nil {
			return err
		}
		if err := writeIfChanged(modelPath, b); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "bindgen: %s not cached: the package is generated from the committed model %s\n", target, relModel)
	}
	b, err := os.ReadFile(modelPath)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	api, err := decodeModel(cfg, b)
	if err != nil {
		return fmt.Errorf("%s: %w", modelPath, err)
	}
	for _, f := range api.Funcs {
		for i, s := range snaps {
			if snapshotSymbols(s)[f.Symbol] {
				f.Since = cfg.setVersion(cfg.Sets[i])
				break
			}
		}
	}
	printSummary(stdout, cfg, api)
	g, err := newGoPkg(cfg, api)
	if err != nil {
		return err
	}
	g.snaps = snaps
	for _, h := range api.Extra {
		if !inIncludeFolder(cfg, root, h) {
			g.setExtra = append(g.setExtra, h)
		}
	}
	if line := manifestLine(cfg, root, target); len(line) > 3 {
		g.headerSource = line[3]
		g.optionalHeader = contains(cfg.Headers.OptionalSources, line[3])
	}
	return g.write(filepath.Join(root, cfg.Out))
}

func (g *goPkg) write(dir string) error {
	types, err := g.emitTypes()
	if err != nil {
		return err
	}
	cgoFile, nocgoFile, err := g.emitFuncs()
	if err != nil {
		return err
	}
	layout, err := g.emitLayoutTest()
	if err != nil {
		return err
	}
	globals, err := g.emitGlobals()
	if err != nil {
		return err
	}
	files := map[string]*jen.File{
		"zdoc.go":         g.emitDoc(),
		"ztypes.go":       types,
		"zsymbols.go":     g.emitSymbols(),
		"zfuncs_cgo.go":   cgoFile,
		"zfuncs_nocgo.go": nocgoFile,
		"zlayout_test.go": layout,
	}
	if globals != nil {
		files["zglobals.go"] = globals
	}
	if g.cfg.Library != nil {
		files["zload.go"] = g.emitLoad()
	}
	if g.cfg.Errors != nil {
		f, err := g.emitErrors()
		if err != nil {
			return err
		}
		files["zerrors.go"] = f
	}
	if g.cfg.Tables != nil {
		f, err := g.emitTables(g.snaps)
		if err != nil {
			return err
		}
		files["ztables.go"] = f
	}
	if g.cfg.Batch != nil {
		batch, err := g.emitBatch()
		if err != nil {
			return fmt.Errorf("batch: %w", err)
		}
		maps.Copy(files, batch)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, f := range files {
		var b bytes.Buffer
		if err := f.Render(&b); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := writeIfChanged(filepath.Join(dir, name), b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func writeIfChanged(path string, b []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// printSummary prints, per kind, how many declarations were found, emitted and skipped
// (with the reasons); emitted + skipped = found for every kind.
func printSummary(w io.Writer, cfg *Config, api *API) {
	fmt.Fprintf(w, "bindgen: %s from %s (%s, settings %s)\n", cfg.Package, api.Header, api.Set, settingNames(cfg))
	kinds := make([]string, 0, len(api.Counts))
	for k := range api.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		c := api.Counts[k]
		skipped := 0
		for _, n := range c.Skipped {
			skipped += n
		}
		fmt.Fprintf(w, "  %-11s %4d found = %4d emitted + %3d skipped\n", k, c.Found, c.Emitted, skipped)
		reasons := make([]string, 0, len(c.Skipped))
		for r := range c.Skipped {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			fmt.Fprintf(w, "      %4d skipped: %s\n", c.Skipped[r], r)
		}
	}
	if len(api.External) > 0 {
		var names []string
		for _, d := range api.External {
			names = append(names, d.CName)
		}
		fmt.Fprintf(w, "  (+%d typedef from our stub headers: %s)\n", len(names), strings.Join(names, ", "))
	}
}

func settingNames(cfg *Config) string {
	var s []string
	for _, st := range cfg.Settings {
		s = append(s, st.Name)
	}
	return strings.Join(s, ", ")
}

// manifestLine returns the tab-separated fields of set's header line in the manifest, or nil.
func manifestLine(cfg *Config, root, set string) []string {
	if cfg.Headers.Manifest == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(root, cfg.Headers.Manifest))
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, "\t"); len(f) > 1 && f[0] == "header" && f[1] == set {
			return f
		}
	}
	return nil
}

// checkManifest checks that every header set of cfg is pinned in the manifest (when the
// config names one and it exists).
func checkManifest(cfg *Config, root string) error {
	if cfg.Headers.Manifest == "" {
		return nil
	}
	path := filepath.Join(root, cfg.Headers.Manifest)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	pinned := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, "\t"); len(f) > 1 && f[0] == "header" {
			pinned[f[1]] = true
		}
	}
	for _, set := range cfg.Sets {
		if !pinned[set] {
			return fmt.Errorf("header set %s is not pinned in %s: %s first", set, cfg.Headers.Manifest, cfg.fetchHint())
		}
	}
	return nil
}
