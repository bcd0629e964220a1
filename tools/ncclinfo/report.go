package main

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/ncclgo/ncclgo/raw/nccl"
)

// Report is everything ncclinfo tells; its JSON form is the --json output.
type Report struct {
	Module   Module     `json:"module"`
	NCCL     Library    `json:"nccl"`
	CUDA     Library    `json:"cuda"`
	GPUs     GPUs       `json:"gpus"`
	Env      []EnvVar   `json:"env"`
	Coverage []Coverage `json:"coverage"`
}

// Module is the build of ncclgo this binary is.
type Module struct {
	// Path is the main module's path, e.g. "github.com/ncclgo/ncclgo".
	Path string `json:"path"`
	// Version is the module version: "v1.2.3", or "(devel)" when built inside the repository.
	Version string `json:"version"`
	// Revision is the VCS revision the binary was built from, when the build recorded it.
	Revision string `json:"revision,omitempty"`
	// Modified says the working tree had uncommitted changes at build time.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain version, e.g. "go1.26.0".
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
	// Cgo says the binary was built with cgo; without it no library can be loaded.
	Cgo bool `json:"cgo"`
}

// Library is what the loader found for one library.
type Library struct {
	// Name is the library's display name: "NCCL", "CUDA driver".
	Name string `json:"name"`
	// Loaded says a file was loaded.
	Loaded bool `json:"loaded"`
	// Path is the loaded file, resolved by the dynamic loader.
	Path string `json:"path,omitempty"`
	// Source says how Path was found: "NCCLGO_LIBNCCL", "soname", "VIRTUAL_ENV", ...
	Source string `json:"source,omitempty"`
	// Version is the library's version text ("NCCL 2.29.7", "CUDA 12.2").
	Version string `json:"version,omitempty"`
	// VersionCode is the library's version code (22907, 12020).
	VersionCode int `json:"version_code,omitempty"`
	// Attempts are the files tried, in search order.
	Attempts []Attempt `json:"attempts"`
	// Error is the load error (with the loader's messages) when nothing was loaded.
	Error string `json:"error,omitempty"`
	// Hint says, when nothing was loaded, where ncclgo's cache has the library (and the
	// variable to set) and how to get it on a real machine.
	Hint []string `json:"hint,omitempty"`
}

// Attempt is one file the loader tried.
type Attempt struct {
	Source string `json:"source"`
	Path   string `json:"path"`
	// Error is the loader's message; empty for the file that loaded.
	Error string `json:"error,omitempty"`
}

// GPUs is what the CUDA driver reports about the devices.
type GPUs struct {
	// Count is the number of visible devices.
	Count   int    `json:"count"`
	Devices []GPU  `json:"devices"`
	Peers   []Peer `json:"peers"`
	// Error says why there is no device list: no driver, no device, a failed query.
	Error string `json:"error,omitempty"`
}

// GPU is one device.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	// MemoryBytes is the device's total memory.
	MemoryBytes uint64 `json:"memory_bytes"`
	// ComputeCapability is "major.minor", e.g. "9.0".
	ComputeCapability string `json:"compute_capability"`
	Multiprocessors   int    `json:"multiprocessors"`
	// PCIBusID is "domain:bus:device.function", e.g. "0000:18:00.0".
	PCIBusID string `json:"pci_bus_id"`
}

// Peer is the link from one device to another, as the CUDA driver reports it. The
// driver does not name the link type: native atomics between two GPUs mark an
// NVLink-class link, peer access alone may be PCIe.
type Peer struct {
	From int `json:"from"`
	To   int `json:"to"`
	// Access is cuDeviceCanAccessPeer.
	Access bool `json:"access"`
	// NativeAtomics is CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED.
	NativeAtomics bool `json:"native_atomics"`
	// PerformanceRank is CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK (lower is faster).
	PerformanceRank int `json:"performance_rank"`
}

// EnvVar is one environment variable that changes what ncclgo or NCCL does.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Coverage is how much of a raw package the loaded library backs.
type Coverage struct {
	// Package is "raw/nccl" or "raw/cuda".
	Package string `json:"package"`
	// Library is the loaded library's version text.
	Library string `json:"library,omitempty"`
	// Functions counts the C functions the package binds.
	Functions int `json:"functions"`
	// Present counts those the loaded library exports.
	Present int       `json:"present"`
	Missing []Missing `json:"missing"`
	// Error says why coverage is unknown (no library loaded, no symbol table).
	Error string `json:"error,omitempty"`
}

// Missing is one bound function that the loaded library does not export.
type Missing struct {
	Symbol string `json:"symbol"`
	// Since is the first pinned header version that declares it ("2.29.7"); for the
	// CUDA driver, the cuda.h version that declares it.
	Since string `json:"since"`
}

// sources is where a report's facts come from; tests replace them.
type sources struct {
	build    func() (*debug.BuildInfo, bool)
	environ  func() []string
	nccl     func() nccl.LoadInfo
	cuda     func() nccl.LoadInfo
	gpus     func() GPUs
	coverage func() []Coverage
	glob     func(pattern string) []string
}

// gather builds the report. Nothing in it fails: what cannot be found is reported.
func gather(s sources) Report {
	r := Report{
		Module: module(s.build),
		NCCL:   library(s.nccl()),
		CUDA:   library(s.cuda()),
		Env:    environment(s.environ()),
	}
	if !r.NCCL.Loaded {
		r.NCCL.Hint = hint(ncclHint, s.environ(), s.glob)
	}
	if !r.CUDA.Loaded {
		r.CUDA.Hint = hint(cudaHint, s.environ(), s.glob)
	}
	if r.CUDA.Loaded {
		r.GPUs = s.gpus()
	} else {
		r.GPUs = GPUs{Error: "no CUDA driver loaded"}
	}
	if r.GPUs.Devices == nil {
		r.GPUs.Devices = []GPU{}
	}
	if r.GPUs.Peers == nil {
		r.GPUs.Peers = []Peer{}
	}
	r.Coverage = s.coverage()
	return r
}

// module describes the running binary from its build information.
func module(build func() (*debug.BuildInfo, bool)) Module {
	m := Module{Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Version: "unknown"}
	bi, ok := build()
	if !ok || bi == nil {
		return m
	}
	m.Path, m.Go = bi.Main.Path, bi.GoVersion
	if bi.Main.Version != "" {
		m.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			m.Revision = s.Value
		case "vcs.modified":
			m.Modified = s.Value == "true"
		case "CGO_ENABLED":
			m.Cgo = s.Value == "1"
		case "GOOS":
			m.Platform = s.Value + m.Platform[strings.Index(m.Platform, "/"):]
		case "GOARCH":
			m.Platform = m.Platform[:strings.Index(m.Platform, "/")+1] + s.Value
		}
	}
	return m
}

// library turns the loader's record into the report's form.
func library(info nccl.LoadInfo) Library {
	l := Library{
		Name: info.Library, Loaded: info.Err == nil && info.Path != "",
		Path: info.Path, Source: info.Source, Version: info.Version, VersionCode: info.VersionCode,
		Attempts: []Attempt{},
	}
	for _, a := range info.Attempts {
		at := Attempt{Source: a.Source, Path: a.Path}
		if a.Err != nil {
			at.Error = a.Err.Error()
		}
		l.Attempts = append(l.Attempts, at)
	}
	if info.Err != nil {
		l.Error = info.Err.Error()
	}
	return l
}

// envNames are variables outside the NCCL_ and NCCLGO_ prefixes that change which
// library is found or which devices are visible.
var envNames = map[string]bool{
	"CUDA_HOME": true, "CUDA_VISIBLE_DEVICES": true, "LD_LIBRARY_PATH": true,
	"VIRTUAL_ENV": true, "CONDA_PREFIX": true,
}

// environment keeps the variables that matter, sorted by name.
func environment(env []string) []EnvVar {
	out := []EnvVar{}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "NCCL_") || strings.HasPrefix(name, "NCCLGO_") || envNames[name] {
			out = append(out, EnvVar{Name: name, Value: value})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// osSources are the real sources: this binary, this process's environment, the
// libraries as raw/nccl and raw/cuda load them.
func osSources() sources {
	return sources{
		build:    debug.ReadBuildInfo,
		environ:  os.Environ,
		nccl:     nccl.LibraryInfo,
		cuda:     cudaInfo,
		gpus:     probeGPUs,
		coverage: coverage,
		glob: func(p string) []string {
			m, _ := filepath.Glob(p) // the pattern is ours and well formed
			return m
		},
	}
}
