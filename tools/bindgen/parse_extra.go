package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// extraHeaders returns the entries of cfg.ExtraHeaders that set includes, in order, and
// whether any of them is a header of the set itself (then every file of the set's folder
// counts as the header's). A header the manifest pins for set but the cache lacks makes
// the set not cached (ErrNoHeaders): it is then read from its committed snapshot.
func extraHeaders(cfg *Config, root, set, dir string) ([]string, error) {
	if len(cfg.ExtraHeaders) == 0 {
		return nil, nil
	}
	pinned := manifestFiles(cfg, root, set)
	var out []string
	own := false
	for _, h := range cfg.ExtraHeaders {
		if inIncludeFolder(cfg, root, h) {
			out = append(out, h)
			continue
		}
		if !pinnedFile(pinned, h) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, h)); err != nil {
			if os.IsNotExist(err) {
				return nil, fmt.Errorf("header %s of set %s is pinned but not in the cache (%s): %s: %w", h, set, dir, cfg.fetchHint(), ErrNoHeaders)
			}
			return nil, err
		}
		own = true
		out = append(out, h)
	}
	if !own {
		return nil, nil
	}
	return out, nil
}

// inIncludeFolder says whether h is one of our own headers (in a folder of cfg.Include).
func inIncludeFolder(cfg *Config, root, h string) bool {
	for _, inc := range cfg.Include {
		if _, err := os.Stat(filepath.Join(root, inc, h)); err == nil {
			return true
		}
	}
	return false
}

// pinnedFile says whether one of the files pinned (paths inside their package or
// repository) is h or ends in "/"+h.
func pinnedFile(pinned []string, h string) bool {
	for _, f := range pinned {
		if f == h || strings.HasSuffix(f, "/"+h) {
			return true
		}
	}
	return false
}

// manifestFiles returns the file column of every header line of set in the manifest.
func manifestFiles(cfg *Config, root, set string) []string {
	if cfg.Headers.Manifest == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(root, cfg.Headers.Manifest))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, "\t"); len(f) > 6 && f[0] == "header" && f[1] == set {
			out = append(out, f[6])
		}
	}
	return out
}
