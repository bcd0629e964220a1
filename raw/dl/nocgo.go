//go:build !cgo || !linux

package dl

// haveDL says dlopen is available.
const haveDL = false

// dlopen fails: loading shared libraries needs cgo on Linux.
func dlopen(string) (uintptr, string, error) { return 0, "", ErrNeedsCgo }

// dlsym is never reached without a handle.
func dlsym(uintptr, string) (uintptr, error) { return 0, ErrNeedsCgo }

// callVersion is never reached without a handle.
func callVersion(uintptr) (int, bool) { return 0, false }
