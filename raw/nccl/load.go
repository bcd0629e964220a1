package nccl

import (
	"fmt"

	"github.com/ncclgo/ncclgo/raw/internal/dl"
)

// lib is libnccl, opened on first use. The generated functions resolve their symbols in it.
var lib = &dl.Library{
	Name:          "NCCL",
	Header:        "nccl.h",
	Env:           "NCCLGO_LIBNCCL",
	Sonames:       []string{"libnccl.so.2"},
	WheelDirs:     []string{"nvidia/nccl/lib"},
	HomeEnvs:      []string{"NCCL_HOME", "CUDA_HOME"},
	VersionSymbol: "ncclGetVersion",
	FormatVersion: func(code int) string { return "NCCL " + FormatVersion(code) },
}

// Errors of loading libnccl and resolving its functions; see package dl for details.
var (
	// ErrLibraryNotFound is matched by the error of every call when no libnccl could be
	// loaded; the error is a *LoadError listing each file tried and the loader's message.
	ErrLibraryNotFound = dl.ErrLibraryNotFound
	// ErrSymbolNotFound is matched by a *SymbolError: the loaded libnccl is older than
	// the function.
	ErrSymbolNotFound = dl.ErrSymbolNotFound
	// ErrNeedsCgo is returned by every call of a binary built with CGO_ENABLED=0.
	ErrNeedsCgo = dl.ErrNeedsCgo
	// ErrAlreadyLoaded is matched by the error of SetLibraryPath after first use.
	ErrAlreadyLoaded = dl.ErrAlreadyLoaded
)

// SymbolError is the error of a function the loaded libnccl does not export. Its message
// names the function, the file, its version and the first NCCL version that has it:
// "symbol ncclCommSuspend not found in /usr/lib/libnccl.so.2 (NCCL 2.22.3): needs NCCL ≥ 2.29.7".
type SymbolError = dl.SymbolError

// LoadError is the error of a libnccl that could not be loaded: every file tried, with
// the loader's message.
type LoadError = dl.LoadError

// LoadInfo describes which libnccl was loaded, how it was found and what was tried.
type LoadInfo = dl.LoadInfo

// Attempt is one file tried while looking for libnccl.
type Attempt = dl.Attempt

// SetLibraryPath makes path the libnccl to load, ahead of $NCCLGO_LIBNCCL and of the
// search (soname, Python wheels, $NCCL_HOME, $CUDA_HOME). Call it before the first NCCL
// call; afterwards it returns an error matching ErrAlreadyLoaded.
func SetLibraryPath(path string) error { return lib.SetPath(path) }

// LibraryInfo loads libnccl if that was not tried yet and tells which file was loaded,
// why, its version, and every file tried before it.
func LibraryInfo() LoadInfo { return lib.Info() }

// LoadedVersion loads libnccl if needed and returns its version code, as ncclGetVersion
// gives it (22907 for NCCL 2.29.7).
func LoadedVersion() (int, error) { return lib.Version() }

// Version is the NCCL_VERSION macro: the code NCCL uses for a version,
// 2.29.7 -> 22907, 2.8.4 -> 2804.
func Version(major, minor, patch int) int {
	if major <= 2 && minor <= 8 {
		return major*1000 + minor*100 + patch
	}
	return major*10000 + minor*100 + patch
}

// FormatVersion writes a version code as major.minor.patch: 22907 -> "2.29.7".
func FormatVersion(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
}

// SymbolStatus says whether the loaded libnccl exports one function of this package.
type SymbolStatus = dl.SymbolStatus

// Coverage loads libnccl if needed and reports, for every function of this package, whether
// the loaded library exports it, with the first pinned header version that declares it.
// The error is the load error when no library could be loaded.
func Coverage() ([]SymbolStatus, error) { return lib.Coverage(symbols) }
