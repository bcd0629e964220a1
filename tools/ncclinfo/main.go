// Command ncclinfo tells what ncclgo finds on this machine: the module version, which
// libnccl and libcuda were loaded, from where and why (every file the loader tried),
// their versions, the GPUs and the links between them, the NCCL_* and NCCLGO_*
// environment, and how much of raw/nccl and raw/cuda the loaded libraries back.
//
// Usage:
//
//	go run ./tools/ncclinfo [--json]
//
// It works on any machine: with no GPU or no library it says so and exits 0. A library
// that cannot be loaded is reported with the loader's message.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, osSources()))
}

// run is the whole command: 0 on success (whatever was or was not found), 2 for a bad
// command line, 1 when the report could not be written.
func run(args []string, stdout, stderr io.Writer, src sources) int {
	fs := flag.NewFlagSet("ncclinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "write the report as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ncclinfo [--json]\n\nTells which NCCL and CUDA libraries ncclgo finds, the GPUs, the environment and the raw bindings' coverage.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ncclinfo: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	r := gather(src)
	var err error
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(r)
	} else {
		err = writeText(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ncclinfo: writing the report: %v\n", err)
		return 1
	}
	return 0
}
