package dl_test

import (
	"errors"
	"fmt"

	"github.com/ncclgo/ncclgo/raw/dl"
)

// Version codes as libraries report them, written the way their headers define them.
func ExampleFormatVersion() {
	fmt.Println(dl.FormatVersion(23007, 10000, 100, 1)) // NCCL_VERSION(2, 30, 7)
	fmt.Println(dl.FormatVersion(12020, 1000, 10))      // CUDA 12.2
	// Output:
	// 2.30.7
	// 12.2
}

// What a generated package declares (zload.go, from its config) and what a call does
// when the library is nowhere to be found: an error, never a crash.
func ExampleLibrary() {
	lib := &dl.Library{Name: "demo", Header: "demo.h", Env: "DEMO_LIBRARY_UNSET", Sonames: []string{"libncclgo-demo-absent.so.1"}}
	sym := dl.Symbol{Name: "demoAdd", Since: "1.2.3"}
	_, err := lib.Resolve(&sym)
	fmt.Println(errors.Is(err, dl.ErrLibraryNotFound) || errors.Is(err, dl.ErrNeedsCgo))
	fmt.Println(lib.Loaded())
	// Output:
	// true
	// false
}
