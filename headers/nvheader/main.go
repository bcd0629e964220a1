// Command nvheader produces nccl.h for an NCCL release from NVIDIA's own published
// sources, for headers/fetch.sh when Debian does not serve the release:
//
//   - github: src/nccl.h.in at the release tag (vX.Y.Z-1) of NVIDIA/nccl, with the
//     substitutions of the nccl.h rule of src/Makefile at that tag (${nccl:Major} ...
//     ${nccl:Version}, values from makefiles/version.mk): what `make` writes to
//     build/include/nccl.h. Applied to v2.29.7-1 it gives Debian's 2.29.7 nccl.h byte for
//     byte.
//   - pypi: include/nccl.h of NVIDIA's wheel nvidia-nccl-cu12 or nvidia-nccl-cu13
//     (manylinux, x86_64), checked against the sha256 PyPI publishes for the wheel.
//   - git: the github recipe read from a local clone (its work tree or git directory:
//     git --git-dir DIR show TAG:PATH); no network. The manifest line is github's.
//
// Usage:
//
//	nvheader -source github|pypi|git -version 2.30.7 -out FILE [-sha256 SUM]
//	         [-tag v2.30.7-1] [-package nvidia-nccl-cu12] [-git DIR]
//	         [-github-base URL] [-pypi-base URL] [-file src/include/nccl_device/core.h]
//
// With -file (github or git) it writes that file of the repository at the tag as it is
// instead: the headers nccl.h's set also pins (NCCL's nccl_device/*.h).
//
// It writes FILE and prints one manifest line (headers/manifest.tsv) on stdout. With
// -sha256 the result must have that checksum (a pinned line is being refetched). The exit
// status is 3 when a file could not be had from the source's host, 1 for any other failure.
package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func main() {
	o := options{}
	flag.StringVar(&o.source, "source", "github", "github, pypi or git")
	flag.StringVar(&o.version, "version", "", "NCCL release, e.g. 2.30.7")
	flag.StringVar(&o.tag, "tag", "", "release tag (default v<version>-1)")
	flag.StringVar(&o.pkg, "package", "nvidia-nccl-cu12", "pypi: the wheel's project")
	flag.StringVar(&o.gitDir, "git", "", "git: a clone of NVIDIA/nccl (its folder or its git directory)")
	flag.StringVar(&o.githubBase, "github-base", "https://raw.githubusercontent.com", "github: raw file server")
	flag.StringVar(&o.pypiBase, "pypi-base", "https://pypi.org", "pypi: package index")
	flag.StringVar(&o.file, "file", "", "github, git: a file of the repository to write as it is (a header nccl.h includes)")
	out := flag.String("out", "", "file to write nccl.h to")
	want := flag.String("sha256", "", "required sha256 of the result")
	flag.Parse()
	if o.version == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: nvheader -source github|pypi|git -version X.Y.Z -out FILE [-sha256 SUM]")
		os.Exit(2)
	}
	// A host that cannot be reached fails within seconds (CI reaches only Debian).
	o.client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
	}}
	h, err := fetch(o)
	if err == nil && *want != "" && h.sha256 != *want {
		err = fmt.Errorf("nccl.h of %s from %s has sha256 %s, the manifest pins %s", o.version, h.url, h.sha256, *want)
	}
	if err == nil {
		err = os.WriteFile(*out, h.data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvheader:", err)
		var u *unreachableError
		if errors.As(err, &u) {
			os.Exit(3) // fetch.sh skips the source
		}
		os.Exit(1)
	}
	fmt.Println(h.manifestLine("nccl-" + o.version))
}

// unreachableError is a file that could not be had from its host (no answer, no DNS, an
// HTTP error status): the exit status 3 tells fetch.sh to skip that source. Content that
// is wrong (another checksum, a Makefile without the nccl.h rule) is an ordinary error.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

type options struct {
	source, version, tag, pkg, gitDir string
	file                              string // a plain file of the repository instead of nccl.h
	githubBase, pypiBase              string
	client                            *http.Client
}

// header is a produced nccl.h and where it came from, as the manifest records it.
type header struct {
	data                      []byte
	sha256                    string
	pkg, suite, version, file string
	url                       string
}

// manifestLine is the header line of headers/manifest.tsv for set.
func (h *header) manifestLine(set string) string {
	return strings.Join([]string{"header", set, h.pkg, h.suite, "-", h.version, h.file, h.sha256, h.url}, "\t")
}

var versionRE = regexp.MustCompile(`^\d+\.\d+\.\d+$`)

func fetch(o options) (*header, error) {
	if !versionRE.MatchString(o.version) {
		return nil, fmt.Errorf("version %q is not X.Y.Z", o.version)
	}
	if o.tag == "" {
		o.tag = "v" + o.version + "-1"
	}
	switch o.source {
	case "github":
		base := strings.TrimRight(o.githubBase, "/") + "/NVIDIA/nccl/" + o.tag + "/"
		read := func(p string) ([]byte, error) { return get(o.client, base+p) }
		if o.file != "" {
			return plainFile(o, read)
		}
		h, err := fromSources(o.version, read)
		if err != nil {
			return nil, err
		}
		h.url = base + "src/nccl.h.in"
		return h, nil
	case "git":
		if o.gitDir == "" {
			return nil, errors.New("source git needs -git DIR")
		}
		gitDir, err := resolveGitDir(o.gitDir)
		if err != nil {
			return nil, err
		}
		read := func(p string) ([]byte, error) {
			out, err := exec.Command("git", "--git-dir", gitDir, "show", o.tag+":"+p).Output()
			if err != nil {
				var x *exec.ExitError
				if errors.As(err, &x) && len(x.Stderr) > 0 {
					err = errors.New(strings.TrimSpace(string(x.Stderr)))
				}
				return nil, fmt.Errorf("git show %s:%s in %s: %w", o.tag, p, o.gitDir, err)
			}
			return out, nil
		}
		if o.file != "" {
			return plainFile(o, read)
		}
		h, err := fromSources(o.version, read)
		if err != nil {
			return nil, err
		}
		// The same bytes as github's: pin the URL CI would use.
		h.url = strings.TrimRight(o.githubBase, "/") + "/NVIDIA/nccl/" + o.tag + "/src/nccl.h.in"
		return h, nil
	case "pypi":
		if o.file != "" {
			return nil, errors.New("-file needs source github or git")
		}
		return fromWheel(o)
	}
	return nil, fmt.Errorf("unknown source %q (github, pypi or git)", o.source)
}

// plainFile is o.file of NVIDIA/nccl at o.tag, as it is (read gets a path of the tag).
func plainFile(o options, read func(string) ([]byte, error)) (*header, error) {
	b, err := read(o.file)
	if err != nil {
		return nil, err
	}
	url := strings.TrimRight(o.githubBase, "/") + "/NVIDIA/nccl/" + o.tag + "/" + o.file
	return &header{data: b, sha256: sum(b), pkg: "NVIDIA/nccl", suite: "github", version: o.tag, file: o.file, url: url}, nil
}

// resolveGitDir is the git directory of dir: dir itself (a bare clone, or a .git folder),
// or the one of the work tree at dir (a plain clone; its .git may also be a file).
func resolveGitDir(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		return dir, nil
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "--absolute-git-dir").Output()
	if err != nil {
		return "", fmt.Errorf("%s is no git work tree (git rev-parse: %w)", dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func get(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, &unreachableError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Proxies and firewalls answer for hosts a machine may not reach (403, 407, 502):
		// like no answer at all, the source is skipped by fetch.sh.
		return nil, &unreachableError{fmt.Errorf("GET %s: %s", url, resp.Status)}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return b, nil
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// makeVar matches "NAME := value" lines of a makefile.
var makeVar = regexp.MustCompile(`(?m)^\s*([A-Z_]+)\s*:?=[ \t]*(.*?)\s*$`)

// sedSubst matches one -e "s/\$${nccl:Key}/$(VAR)/g" of the nccl.h rule.
var sedSubst = regexp.MustCompile(`s/\\\$\$\{nccl:([A-Za-z]+)\}/\$\(([A-Z_]+)\)/g`)

// versionEval matches the rule's NCCL_VERSION := $(shell printf "FMT" $(A) $(B) $(C)).
var versionEval = regexp.MustCompile(`\$\(eval\s+([A-Z_]+)\s*:=\s*\$\(shell printf "([^"]*)"((?:\s+\$\([A-Z_]+\))*)\)\)`)

// fromSources applies the nccl.h rule of src/Makefile to src/nccl.h.in, with the values
// of makefiles/version.mk, reading each file with read.
func fromSources(version string, read func(path string) ([]byte, error)) (*header, error) {
	in, err := read("src/nccl.h.in")
	if err != nil {
		return nil, err
	}
	mk, err := read("src/Makefile")
	if err != nil {
		return nil, err
	}
	vmk, err := read("makefiles/version.mk")
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	for _, m := range makeVar.FindAllStringSubmatch(string(vmk), -1) {
		vars[m[1]] = m[2]
	}
	if got := vars["NCCL_MAJOR"] + "." + vars["NCCL_MINOR"] + "." + vars["NCCL_PATCH"]; got != version {
		return nil, fmt.Errorf("makefiles/version.mk says %s, not %s", got, version)
	}
	rule := string(mk)
	i := strings.Index(rule, "/nccl.h : nccl.h.in")
	if i < 0 {
		return nil, errors.New("src/Makefile has no nccl.h : nccl.h.in rule")
	}
	rule = rule[i:]
	if j := strings.Index(rule, "\n\n"); j > 0 {
		rule = rule[:j]
	}
	for _, m := range versionEval.FindAllStringSubmatch(rule, -1) {
		var args []any
		for _, a := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(m[3], -1) {
			n, err := strconv.Atoi(vars[a[1]])
			if err != nil {
				return nil, fmt.Errorf("%s is %q, not a number", a[1], vars[a[1]])
			}
			args = append(args, n)
		}
		vars[m[1]] = fmt.Sprintf(m[2], args...)
	}
	subs := sedSubst.FindAllStringSubmatch(rule, -1)
	if len(subs) == 0 {
		return nil, errors.New("the nccl.h rule of src/Makefile has no ${nccl:...} substitution")
	}
	out := string(in)
	for _, s := range subs {
		v, ok := vars[s[2]]
		if !ok {
			return nil, fmt.Errorf("the nccl.h rule uses $(%s), which makefiles/version.mk does not set", s[2])
		}
		out = strings.ReplaceAll(out, "${nccl:"+s[1]+"}", v)
	}
	if k := strings.Index(out, "${nccl:"); k >= 0 {
		return nil, fmt.Errorf("nccl.h.in keeps an unsubstituted %q", out[k:k+strings.IndexByte(out[k:], '}')+1])
	}
	b := []byte(out)
	return &header{data: b, sha256: sum(b), pkg: "NVIDIA/nccl", suite: "github", version: "v" + version + "-1", file: "src/nccl.h.in"}, nil
}

// pypiRelease is the part of PyPI's JSON API (/pypi/<project>/<version>/json) used here.
type pypiRelease struct {
	URLs []struct {
		Filename    string            `json:"filename"`
		URL         string            `json:"url"`
		PackageType string            `json:"packagetype"`
		Digests     map[string]string `json:"digests"`
	} `json:"urls"`
}

// fromWheel takes include/nccl.h out of NVIDIA's manylinux x86_64 wheel.
func fromWheel(o options) (*header, error) {
	index := strings.TrimRight(o.pypiBase, "/") + "/pypi/" + o.pkg + "/" + o.version + "/json"
	b, err := get(o.client, index)
	if err != nil {
		return nil, err
	}
	var rel pypiRelease
	if err := json.Unmarshal(b, &rel); err != nil {
		return nil, fmt.Errorf("%s: %w", index, err)
	}
	for _, u := range rel.URLs {
		if u.PackageType != "bdist_wheel" || !strings.Contains(u.Filename, "manylinux") || !strings.Contains(u.Filename, "x86_64") {
			continue
		}
		whl, err := get(o.client, u.URL)
		if err != nil {
			return nil, err
		}
		if want := u.Digests["sha256"]; want == "" || sum(whl) != want {
			return nil, fmt.Errorf("wheel %s has sha256 %s, PyPI publishes %q", u.URL, sum(whl), want)
		}
		zr, err := zip.NewReader(bytes.NewReader(whl), int64(len(whl)))
		if err != nil {
			return nil, fmt.Errorf("wheel %s: %w", u.URL, err)
		}
		for _, f := range zr.File {
			if path.Base(f.Name) != "nccl.h" || path.Base(path.Dir(f.Name)) != "include" {
				continue
			}
			r, err := f.Open()
			if err != nil {
				return nil, err
			}
			data, err := io.ReadAll(io.LimitReader(r, 16<<20))
			r.Close()
			if err != nil {
				return nil, fmt.Errorf("wheel %s: %s: %w", u.URL, f.Name, err)
			}
			return &header{data: data, sha256: sum(data), pkg: o.pkg, suite: "pypi", version: o.version, file: f.Name, url: u.URL}, nil
		}
		return nil, fmt.Errorf("wheel %s has no include/nccl.h", u.URL)
	}
	return nil, fmt.Errorf("%s lists no manylinux x86_64 wheel of %s %s", index, o.pkg, o.version)
}
