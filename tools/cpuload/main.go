// Command cpuload runs a command while it keeps every CPU busy, so that tests which lean
// on timing margins fail where they would on a loaded machine.
//
// Usage:
//
//	cpuload [-procs N] -- COMMAND [ARG...]
//
// It starts N spinning threads (default: the number of CPUs), runs COMMAND with the
// same standard input, output and error, stops spinning when COMMAND ends and exits with
// COMMAND's exit status (2 for a bad command line, 1 when COMMAND cannot start). SIGINT
// and SIGTERM are passed on to COMMAND.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cpuload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("procs", runtime.NumCPU(), "spinning `threads` to run alongside the command")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: cpuload [-procs N] -- COMMAND [ARG...]\n\nRuns COMMAND while N threads keep the CPUs busy.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "cpuload: no command to run")
		fs.Usage()
		return 2
	}
	if *procs < 0 {
		fmt.Fprintf(stderr, "cpuload: -procs %d: the thread count is negative\n", *procs)
		return 2
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "cpuload: starting %s: %v\n", fs.Arg(0), err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	stop := spin(*procs)
	err := cmd.Wait()
	spins := stop()
	fmt.Fprintf(stderr, "cpuload: %d threads spun %d million loops while %s ran\n", *procs, spins/1e6, fs.Arg(0))
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ee.ExitCode() < 0 { // killed by a signal
			return 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
		return ee.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "cpuload: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	return 0
}

// spin starts n threads that loop until the returned function is called; that function
// waits for them and returns the loops they made.
func spin(n int) func() uint64 {
	var done atomic.Bool
	var total atomic.Uint64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			var loops uint64
			for !done.Load() {
				for range 1 << 12 {
					loops++
				}
			}
			total.Add(loops)
		})
	}
	return func() uint64 {
		done.Store(true)
		wg.Wait()
		return total.Load()
	}
}
