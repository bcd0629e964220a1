// Command bindgen generates ncclgo's raw bindings (raw/nccl, raw/cuda) and the API
// snapshots in gen/snapshot from the pinned NVIDIA headers.
//
// Usage:
//
//	bindgen [-root DIR] [-cache DIR] CONFIG.json...   generate (go generate runs this)
//	bindgen diff OLD.txt NEW.txt                       print the API difference of two snapshots
//
// Each CONFIG (gen/nccl.json, gen/cuda.json) names a header, its header sets, the
// preprocessor settings, the naming prefixes and a skip list in which every entry has a
// reason. Headers are read from $NCCLGO_CACHE/header/<set>/ (default ~/.cache/ncclgo);
// `make headers` puts them there.
//
// Stages: parse (cc/v4, parse.go) -> model (model.go) -> emit (jennifer, emit_*.go).
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

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bindgen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "diff" {
		return runDiff(args[1:], stdout)
	}
	fs := flag.NewFlagSet("bindgen", flag.ContinueOnError)
	root := fs.String("root", "", "repository root (default: the folder holding go.mod above the working directory)")
	cache := fs.String("cache", "", "header cache (default $NCCLGO_CACHE or ~/.cache/ncclgo)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("usage: bindgen [-root DIR] [-cache DIR] CONFIG.json... | bindgen diff OLD NEW")
	}
	var err error
	if *root == "" {
		if *root, err = findRoot(); err != nil {
			return err
		}
	}
	if *cache == "" {
		*cache = cacheDir()
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
	if len(args) != 2 {
		return fmt.Errorf("usage: bindgen diff OLD.txt NEW.txt")
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

func cacheDir() string {
	if c := os.Getenv("NCCLGO_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "ncclgo")
	}
	return filepath.Join(home, ".cache", "ncclgo")
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

// setVersion is the version part of a header set name: nccl-2.22.3 -> 2.22.3.
func setVersion(set string) string { return set[strings.LastIndex(set, "-")+1:] }

// generate parses every header set of a config, writes the snapshots and the package.
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
	snaps := make([]map[string]*entity, len(cfg.Sets))
	for i, set := range cfg.Sets {
		snapPath := filepath.Join(root, "gen", "snapshot", set+".txt")
		if errs[i] != nil {
			// An older set whose header is not cached: use its committed snapshot.
			if i < len(cfg.Sets)-1 && errors.Is(errs[i], ErrNoHeaders) {
				b, err := os.ReadFile(snapPath)
				if err != nil {
					return errs[i]
				}
				if snaps[i], err = readSnapshot(bytes.NewReader(b)); err != nil {
					return fmt.Errorf("%s: %w", snapPath, err)
				}
				fmt.Fprintf(stdout, "bindgen: %s not cached, using %s\n", set, snapPath)
				continue
			}
			return errs[i]
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
	api := apis[len(apis)-1]
	for _, f := range api.Funcs {
		for i, s := range snaps {
			if snapshotSymbols(s)[f.Symbol] {
				f.Since = setVersion(cfg.Sets[i])
				break
			}
		}
	}
	printSummary(stdout, cfg, api)
	g, err := newGoPkg(cfg, api)
	if err != nil {
		return err
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
	files := map[string]*jen.File{
		"zdoc.go":         g.emitDoc(),
		"ztypes.go":       types,
		"zsymbols.go":     g.emitSymbols(),
		"zfuncs_cgo.go":   cgoFile,
		"zfuncs_nocgo.go": nocgoFile,
		"zlayout_test.go": layout,
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

// checkManifest checks that every header set of cfg is pinned in headers/manifest.tsv
// (when the repository has one).
func checkManifest(cfg *Config, root string) error {
	b, err := os.ReadFile(filepath.Join(root, "headers", "manifest.tsv"))
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
			return fmt.Errorf("header set %s is not pinned in headers/manifest.tsv: run make headers NCCL=<version> first", set)
		}
	}
	return nil
}
