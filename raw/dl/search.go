package dl

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// env is what the search reads from its surroundings, so tests can replace it.
type env interface {
	Getenv(key string) string
	LookPath(file string) (string, error)
	Glob(pattern string) []string
}

// osEnv is the process environment and file system.
type osEnv struct{}

func (osEnv) Getenv(key string) string             { return os.Getenv(key) }
func (osEnv) LookPath(file string) (string, error) { return exec.LookPath(file) }

func (osEnv) Glob(pattern string) []string {
	m, _ := filepath.Glob(pattern) // the only error is a malformed pattern, and ours are fixed
	sort.Strings(m)
	return m
}

// candidates lists the files to try, in search order (see Library.Load).
func (l *Library) candidates(explicit string, e env) []Attempt {
	if explicit != "" {
		return []Attempt{{Source: "SetLibraryPath", Path: explicit}}
	}
	if l.Env != "" {
		if p := e.Getenv(l.Env); p != "" {
			return []Attempt{{Source: l.Env, Path: p}}
		}
	}
	var out []Attempt
	seen := map[string]bool{}
	add := func(source, path string) {
		if !seen[path] {
			seen[path] = true
			out = append(out, Attempt{Source: source, Path: path})
		}
	}
	for _, so := range l.Sonames {
		add("soname", so)
	}
	if len(l.WheelDirs) > 0 {
		for _, sp := range sitePackages(e) {
			for _, wd := range l.WheelDirs {
				for _, so := range l.Sonames {
					add(sp.source, filepath.Join(sp.dir, wd, so))
				}
			}
		}
	}
	for _, h := range l.HomeEnvs {
		home := e.Getenv(h)
		if home == "" {
			continue
		}
		for _, sub := range []string{"lib64", "lib"} {
			for _, so := range l.Sonames {
				add(h, filepath.Join(home, sub, so))
			}
		}
	}
	return out
}

// site is one Python site-packages folder and why it is searched.
type site struct{ source, dir string }

// sitePackages lists the Python package folders to search, most specific first:
// the active virtualenv, the active conda environment, the prefix of the python3 on
// PATH (as found and with links resolved), the user's site-packages, the system's.
func sitePackages(e env) []site {
	var out []site
	seen := map[string]bool{}
	prefix := func(source, p string) {
		if p == "" {
			return
		}
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages"} {
			for _, d := range e.Glob(filepath.Join(p, pat)) {
				if !seen[d] {
					seen[d] = true
					out = append(out, site{source, d})
				}
			}
		}
	}
	prefix("VIRTUAL_ENV", e.Getenv("VIRTUAL_ENV"))
	prefix("CONDA_PREFIX", e.Getenv("CONDA_PREFIX"))
	if py, err := e.LookPath("python3"); err == nil {
		prefix("python3 "+py, filepath.Dir(filepath.Dir(py)))
		if real, err := filepath.EvalSymlinks(py); err == nil {
			prefix("python3 "+py, filepath.Dir(filepath.Dir(real)))
		}
	}
	if home := e.Getenv("HOME"); home != "" {
		prefix("user site-packages", filepath.Join(home, ".local"))
	}
	prefix("system site-packages", "/usr/local")
	prefix("system site-packages", "/usr")
	return out
}
