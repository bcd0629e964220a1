package cuda

import (
	"fmt"

	"github.com/ncclgo/ncclgo/raw/internal/dl"
)

// lib is the CUDA driver (libcuda), opened on first use. The generated functions resolve
// their symbols in it.
var lib = &dl.Library{
	Name:          "CUDA driver",
	Header:        "cuda.h",
	Driver:        true,
	Env:           "NCCLGO_LIBCUDA",
	Sonames:       []string{"libcuda.so.1"},
	HomeEnvs:      []string{"CUDA_HOME"},
	VersionSymbol: "cuDriverGetVersion",
	FormatVersion: func(code int) string { return "CUDA " + FormatVersion(code) },
}

// Errors of loading libcuda and resolving its functions; see package dl for details.
var (
	// ErrLibraryNotFound is matched by the error of every call when no libcuda could be
	// loaded; the error is a *LoadError listing each file tried and the loader's message.
	ErrLibraryNotFound = dl.ErrLibraryNotFound
	// ErrSymbolNotFound is matched by a *SymbolError: the driver is older than the function.
	ErrSymbolNotFound = dl.ErrSymbolNotFound
	// ErrNeedsCgo is returned by every call of a binary built with CGO_ENABLED=0.
	ErrNeedsCgo = dl.ErrNeedsCgo
	// ErrAlreadyLoaded is matched by the error of SetLibraryPath after first use.
	ErrAlreadyLoaded = dl.ErrAlreadyLoaded
)

// SymbolError is the error of a function the loaded driver does not export. Its message
// names the function, the file, the driver's CUDA version and the cuda.h that declares it:
// "symbol cuMemBatchDecompressAsync not found in /usr/lib/libcuda.so.1: not in this
// driver (CUDA 12.2); declared by cuda.h 12.4.1".
type SymbolError = dl.SymbolError

// LoadError is the error of a libcuda that could not be loaded: every file tried, with
// the loader's message.
type LoadError = dl.LoadError

// LoadInfo describes which libcuda was loaded, how it was found and what was tried.
type LoadInfo = dl.LoadInfo

// Attempt is one file tried while looking for libcuda.
type Attempt = dl.Attempt

// SetLibraryPath makes path the libcuda to load, ahead of $NCCLGO_LIBCUDA and of the
// search (soname, $CUDA_HOME). Call it before the first CUDA call; afterwards it returns
// an error matching ErrAlreadyLoaded.
func SetLibraryPath(path string) error { return lib.SetPath(path) }

// LibraryInfo loads libcuda if that was not tried yet and tells which file was loaded,
// why, its version, and every file tried before it.
func LibraryInfo() LoadInfo { return lib.Info() }

// LoadedVersion loads libcuda if needed and returns the CUDA version the driver supports,
// as cuDriverGetVersion gives it (12020 for CUDA 12.2).
func LoadedVersion() (int, error) { return lib.Version() }

// FormatVersion writes a CUDA version code as major.minor: 12020 -> "12.2".
func FormatVersion(code int) string {
	return fmt.Sprintf("%d.%d", code/1000, code%1000/10)
}

// SymbolStatus says whether the loaded libcuda exports one function of this package.
type SymbolStatus = dl.SymbolStatus

// Coverage loads libcuda if needed and reports, for every function of this package, whether
// the loaded library exports it, with the first pinned header version that declares it.
// The error is the load error when no library could be loaded.
func Coverage() ([]SymbolStatus, error) { return lib.Coverage(symbols) }
