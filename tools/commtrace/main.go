// Command commtrace reads the flight-recorder dumps of every rank of a job (one file
// per rank, <prefix><rank>, as ncclgo's comm and PyTorch write them) and prints, for
// each communicator, the first sequence number where the ranks disagree, who is
// missing or who called what (operation, sizes, element type), and each rank's last
// completed operation: a few lines to paste into an incident. It reads PyTorch ranks'
// dumps too, so a job mixing Go and PyTorch ranks is analysed as one.
//
// The cause comes first: a rank missing from a collective because it is blocked in an
// earlier operation of another communicator is reported as that communicator's
// victim, after the communicator whose missing rank has nothing earlier pending.
//
//	commtrace /tmp/dumps              # prefix inferred, as torch's fr_trace does
//	commtrace -p nccl_trace_rank_ DIR
//	commtrace -html hang.html DIR     # also a picture: a self-contained HTML page
//	commtrace -svg hang.svg DIR       # the picture alone, as SVG
//
// The picture has, per communicator (the cause first), one lane per rank with its
// operations in sequence order, coloured by state (completed, started, scheduled),
// the operation where each rank stopped outlined, what a rank never called dashed,
// the verdict's operation framed and the culprits' lanes in red (victims' in orange).
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
	html := fs.String("html", "", "also write the picture of the hang, with the verdicts, as an HTML page to `FILE`")
	svg := fs.String("svg", "", "also write the picture of the hang as SVG to `FILE`")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: commtrace [-p PREFIX] [-html FILE] [-svg FILE] DIR")
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
	for _, out := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{*html, func(w io.Writer) error { return writeHTML(w, traces, vs) }},
		{*svg, func(w io.Writer) error { return writeSVG(w, traces, vs, false) }},
	} {
		if out.path == "" {
			continue
		}
		if err := writeFile(out.path, out.write); err != nil {
			fmt.Fprintln(stderr, "commtrace:", err)
			return 2
		}
	}
	for _, v := range vs {
		if v.Problem != "" {
			return 1
		}
	}
	return 0
}

// writeFile writes path with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
