// Command commbench is nccl-tests for ncclgo: it measures all-reduce, all-gather,
// reduce-scatter, broadcast, reduce, all-to-all, gather, scatter and send/recv through
// package comm and prints nccl-tests'
// table (the same columns, bandwidth formulas and footer), or JSON with -json.
//
// Usage:
//
//	go run ./tools/commbench [-op allreduce] [-b 8] [-e 128M] [-f 2] [-n 20] [-w 1] [-c 1] [-dtype float] [-redop sum]
//	go run ./tools/commbench -sim 4 -op all -b 1K -e 1M -f 4
//	go run ./tools/commbench -sim 2 -b 8 -e 32K -f 8 -m 4 -G 10 -a 3
//	mpirun -np 4 commbench -mpi -op all              (one rank per process, as nccl-tests' MPI mode)
//
// Without -sim it drives every visible GPU from this process, one rank per GPU, with
// comm's NCCL backend. With -sim N it runs N ranks of the same backend on commtest's
// host-memory simulator: every line is marked SIMULATED, and the times measure ncclgo's
// software layers only. With -mpi each process is one rank of an mpirun job, on comm's
// MPI Communicator and host memory: every rank's line is gathered into the header and
// rank 0 prints the tables (times combined over the ranks as -a says, wrong elements
// summed). -c checks every result against a host reference and counts the wrong
// elements in the #wrong columns; the exit status is 1 when any is wrong.
//
// Timing modes, as nccl-tests': -m N issues N operations per timed iteration in one
// group (GroupStart/GroupEnd) and reports the time per operation; -z 1 waits for every
// operation, and for every rank, before the next, -z 2 for every operation only, -z 3
// for every iteration and then every rank, leaving those barriers out of the time;
// -a 0, 1, 2 or 3 reports rank 0's
// time, the mean over the ranks (the default), their minimum or their maximum; -G N
// captures the timed iterations into a CUDA graph per rank (the simulator's model with
// -sim, real graphs on GPUs; -mpi has none) and replays it N times.
//
// comm's AllReduce and Broadcast are in place only, so their out-of-place columns say
// N/A. Sizes take K, M and G suffixes (1024-based, as in nccl-tests).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
)

func main() {
	// Ctrl-C cancels the run: waits return, the ranks are closed, the exit status is 1.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, openWorld)
	stop()
	os.Exit(code)
}

// opener builds the world a configuration asks for.
type opener func(ctx context.Context, c config) (*world, error)

// openWorld opens the simulator for -sim N, else the GPUs.
func openWorld(ctx context.Context, c config) (*world, error) {
	if c.sim > 0 {
		return openSim(ctx, c.sim)
	}
	if c.mpi {
		return openMPI(ctx)
	}
	return openGPUs(ctx, c.gpus)
}

// report is the -json output.
type report struct {
	Tool      string `json:"tool"`
	Version   string `json:"version"`
	Simulated bool   `json:"simulated"`
	// Note says what the figures mean when they are not a GPU's.
	Note        string     `json:"note,omitempty"`
	Ranks       int        `json:"ranks"`
	Devices     []string   `json:"devices"`
	Config      jsonConfig `json:"config"`
	Collectives []*table   `json:"collectives"`
	// OutOfBounds counts the measurements, over all collectives, with wrong elements.
	OutOfBounds int `json:"out_of_bounds"`
}

type jsonConfig struct {
	MinBytes   int64 `json:"minimum_bytes"`
	MaxBytes   int64 `json:"maximum_bytes"`
	StepFactor int64 `json:"step_factor,omitempty"`
	StepBytes  int64 `json:"step_bytes,omitempty"`
	Warmup     int   `json:"warmup_iters"`
	Iters      int   `json:"iterations"`
	Check      int   `json:"validation"`
	// AggIters is -m: operations per timed iteration, grouped when more than 1.
	AggIters int `json:"agg_iters"`
	// Blocking is -z: 1 when every operation was waited for before the next.
	Blocking int `json:"blocking"`
	// Average is -a: which rank's time, or which combination, the times report:
	// rank0, avg, min or max.
	Average string `json:"average"`
	// Graphs is -G: how many times the captured CUDA graph was launched (0: no graph).
	Graphs int      `json:"cudagraph_launches"`
	Args   []string `json:"args"`
}

// run is the whole command: 0 when every result is right, 1 on a failure or a wrong
// result, 2 for a bad command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, open opener) int {
	cfg, err := parseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "commbench: %v\n", err)
		return 2
	}
	if cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	w, err := open(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "commbench: %v\n", err)
		return 1
	}
	if w.quiet { // an MPI rank other than 0: rank 0 prints the table
		stdout = io.Discard
	}
	rep, err := bench(ctx, cfg, w, stdout, newProgress(stderr))
	if cerr := w.close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing: %w", cerr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "commbench: %v\n", err)
		return 1
	}
	if rep.OutOfBounds > 0 {
		return 1
	}
	return 0
}

// bench runs every test of cfg on w and writes the table (or, with -json, the report)
// to out.
func bench(ctx context.Context, cfg config, w *world, out io.Writer, p *progress) (report, error) {
	defer p.done()
	rep := report{
		Tool: "commbench", Version: version(), Simulated: w.simulated, Ranks: w.worldSize(),
		Devices: w.devices, Collectives: []*table{},
		Config: jsonConfig{MinBytes: cfg.minBytes, MaxBytes: cfg.maxBytes, Warmup: cfg.warmup,
			Iters: cfg.iters, Check: cfg.check, AggIters: cfg.aggIters, Blocking: cfg.blocking,
			Average: cfg.average.String(), Graphs: cfg.graphs, Args: cfg.args},
	}
	if cfg.graphs > 0 {
		for i, rk := range w.ranks {
			if _, ok := rk.(capturer); !ok {
				return rep, fmt.Errorf("-G %d: rank %d (%s) cannot capture into a CUDA graph", cfg.graphs, w.id(i), w.devices[min(i, len(w.devices)-1)])
			}
		}
	}
	if cfg.stepFactor > 1 {
		rep.Config.StepFactor = cfg.stepFactor
	} else {
		rep.Config.StepBytes = cfg.stepBytes
	}
	if w.simulated {
		rep.Note = simNote
	}
	var text *textOut
	if !cfg.json {
		text = &textOut{w: out, sim: w.simulated}
		text.preamble(cfg, rep.Version, w)
	}
	r := &runner{cfg: cfg, w: w, progress: p}
	for _, coll := range cfg.colls {
		t := &table{Collective: coll.name, Rows: []row{}}
		if text != nil {
			text.header(coll)
		}
		for _, s := range cfg.tests(coll, w.worldSize()) {
			err := r.runTest(ctx, s, func(rw row) {
				t.add(rw)
				if text != nil {
					text.row(rw)
				}
			})
			if err != nil {
				return rep, err
			}
		}
		if text != nil {
			text.footer(t)
		}
		rep.Collectives = append(rep.Collectives, t)
		rep.OutOfBounds += t.OutOfBounds
	}
	if text != nil {
		return rep, text.err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return rep, enc.Encode(rep)
}

// version is the module version of this binary: "(devel)" inside the repository.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(unknown version)"
}
