package mpi

import (
	"github.com/ncclgo/ncclgo/raw/dl"
)

// lib is Open MPI's libmpi, opened on first use. The generated functions resolve their
// symbols in it, and the handle accessors (CommWorld, Float, Sum ...) the library
// globals whose addresses the handles are.
//
// The package binds Open MPI, not MPICH: the two implementations have different ABIs
// (Open MPI's handles are pointers to library globals, MPICH's are integers encoding a
// kind and an index, and their status structs differ), so a binding generated from one
// mpi.h must load that implementation's library. Open MPI is what Debian's default MPI
// (mpi-default-dev, openmpi-bin) is and what most GPU clusters and NCCL's own nccl-tests
// builds use. The MPI 5 standard ABI (mpi_abi.h) removes the difference; see README.md.
var lib = &dl.Library{
	Name:     "Open MPI",
	Header:   "mpi.h",
	Env:      "NCCLGO_LIBMPI",
	Sonames:  []string{"libmpi.so.40"},
	HomeEnvs: []string{"MPI_HOME", "OMPI_HOME"},
}

// Errors of loading libmpi and resolving its symbols; see package dl for details.
var (
	// ErrLibraryNotFound is matched by the error of every call when no libmpi could be
	// loaded; the error is a *LoadError listing each file tried and the loader's message.
	ErrLibraryNotFound = dl.ErrLibraryNotFound
	// ErrSymbolNotFound is matched by a *SymbolError: the loaded libmpi lacks a function
	// or global.
	ErrSymbolNotFound = dl.ErrSymbolNotFound
	// ErrNeedsCgo is returned by every call of a binary built with CGO_ENABLED=0.
	ErrNeedsCgo = dl.ErrNeedsCgo
	// ErrAlreadyLoaded is matched by the error of SetLibraryPath after first use.
	ErrAlreadyLoaded = dl.ErrAlreadyLoaded
)

// SymbolError is the error of a function or global the loaded libmpi does not export.
type SymbolError = dl.SymbolError

// LoadError is the error of a libmpi that could not be loaded: every file tried, with
// the loader's message.
type LoadError = dl.LoadError

// LoadInfo describes which libmpi was loaded, how it was found and what was tried.
type LoadInfo = dl.LoadInfo

// SymbolStatus says whether the loaded libmpi exports one function or global.
type SymbolStatus = dl.SymbolStatus

// SetLibraryPath makes path the libmpi to load, ahead of $NCCLGO_LIBMPI and of the search
// (the soname libmpi.so.40 through the dynamic loader, then $MPI_HOME and $OMPI_HOME).
// Call it before the first MPI call; afterwards it returns an error matching
// ErrAlreadyLoaded.
func SetLibraryPath(path string) error { return lib.SetPath(path) }

// LibraryInfo loads libmpi if that was not tried yet and tells which file was loaded, why,
// and every file tried before it.
func LibraryInfo() LoadInfo { return lib.Info() }

// Load opens libmpi if that was not tried yet and returns the load error, if any.
func Load() error { return lib.Load() }

// Coverage loads libmpi if needed and reports, for every function and every global of
// this package, whether the loaded library exports it.
func Coverage() ([]SymbolStatus, error) {
	return lib.Coverage(append(append([]*dl.Symbol{}, symbols...), globalSymbols...))
}
