// Command commtrace reads the flight-recorder dumps of every rank of a job (one file
// per rank, <prefix><rank>, as ncclgo's comm and PyTorch write them) and prints, for
// each communicator, the first sequence number where the ranks disagree, who is
// missing or who called what (operation, sizes, element type), and each rank's last
// completed operation: a few lines to paste into an incident. It reads PyTorch ranks'
// dumps too, so a job mixing Go and PyTorch ranks is analysed as one.
//
//	commtrace /tmp/dumps              # prefix inferred, as torch's fr_trace does
//	commtrace -p nccl_trace_rank_ DIR
//
// It exits with 0 when the ranks agree, 1 when it found a problem, 2 when it could
// not read the dumps.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ncclgo/ncclgo/comm/flightrec"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("commtrace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	prefix := fs.String("p", "", "the dump files' common prefix (inferred when empty)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: commtrace [-p PREFIX] DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	traces, err := flightrec.ReadDir(fs.Arg(0), *prefix)
	if err != nil {
		fmt.Fprintln(stderr, "commtrace:", err)
		return 2
	}
	vs := flightrec.Analyze(traces)
	if err := flightrec.Report(stdout, vs); err != nil {
		fmt.Fprintln(stderr, "commtrace:", err)
		return 2
	}
	for _, v := range vs {
		if v.Problem != "" {
			return 1
		}
	}
	return 0
}
