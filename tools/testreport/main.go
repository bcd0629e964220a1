// Command testreport summarises Go test output so that no test passes by not running: it
// counts every test, subtest and benchmark that passed, failed or skipped, per package,
// and lists every skip with its reason.
//
// Usage:
//
//	go test -json ./... 2>&1 | go run ./tools/testreport
//	testreport -gpu OUT
//
// Without -gpu it reads `go test -json` output (the go command's cmd/test2json events) on
// its standard input and writes go test's own closing line per package (ok, FAIL, ?), the
// whole output of every failed package, the lines that were not events (a wrapper's own
// report), then the number of skipped tests per package and each skip's reason. A package
// whose events end before its final pass or fail (the stream was cut short) counts as
// failed. It exits 1 when a package or a test failed, 2 for a bad command line.
//
// With -gpu OUT it reads the files the GPU bundle's run script (tools/gpubundle/run.sh)
// writes under OUT (env.txt, tests.txt, commbench.txt), judges each step and each
// performance target, and writes OUT/summary.txt and OUT/record.md, the entry for
// docs/gpu-results.md. It exits 1 unless every step is ok and no target failed, 3 when
// it could not read or write the files.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gpu := fs.String("gpu", "", "summarise the GPU bundle's results in `folder` (writes summary.txt and record.md there)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "testreport: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *gpu != "" {
		ok, err := gpuRecord(*gpu, stdout)
		if err != nil {
			fmt.Fprintf(stderr, "testreport: %v\n", err)
			return 3
		}
		if !ok {
			return 1
		}
		return 0
	}
	rep, err := parseGoTestJSON(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: reading the test output: %v\n", err)
		return 1
	}
	if !writeGoTest(stdout, rep) {
		return 1
	}
	return 0
}

// writeGoTest writes the summary of `go test -json` output and reports whether every
// package passed.
func writeGoTest(w io.Writer, rep goTestReport) bool {
	ok := true
	var pass, fail, skip int
	blocks := rep.blocks
	for _, b := range blocks {
		p, _ := b.count("PASS")
		f, _ := b.count("FAIL")
		s, _ := b.count("SKIP")
		pass, fail, skip = pass+p, fail+f, skip+s
		failed := f > 0 || b.failLine || b.closing == ""
		if failed {
			ok = false
			for _, l := range b.lines {
				fmt.Fprintln(w, l)
			}
			if b.closing == "" {
				fmt.Fprintf(w, "FAIL\t%s: the output ended before go test's closing line\n", b.name)
			}
			continue
		}
		fmt.Fprintln(w, b.closing)
	}
	// Lines that are not events (the go command's own messages, a wrapper's report such
	// as cpuload's): shown, not judged (go test's exit status judges them).
	for _, l := range rep.other {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintf(w, "\nskipped tests per package (tests, subtests and benchmarks; %d passed, %d failed, %d skipped in all):\n", pass, fail, skip)
	any := false
	for _, b := range blocks {
		s, _ := b.count("SKIP")
		if s == 0 {
			continue
		}
		any = true
		p, _ := b.count("PASS")
		fmt.Fprintf(w, "%5d skipped %5d passed  %s\n", s, p, b.name)
		for _, r := range b.results {
			if r.action == "SKIP" {
				fmt.Fprintf(w, "        %s: %s\n", r.name, r.reasonIn(b.results))
			}
		}
	}
	if !any {
		fmt.Fprintln(w, "    none")
	}
	return ok
}
