package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ncclgo/ncclgo/comm"
)

// errUsage is returned for a command line that does not parse; the message says why.
var errUsage = errors.New("usage")

// config is a parsed command line.
type config struct {
	minBytes, maxBytes int64
	stepBytes          int64
	stepFactor         int64
	iters, warmup      int
	check              int
	aggIters           int     // -m: operations per timed iteration, in one group when more than 1
	blocking           int     // -z: nccl-tests' blocking mode, 0 to 3 (see blockingHelp)
	average            average // -a: how the reported time combines the ranks' times
	graphs             int     // -G: launches of the captured iterations (0: no CUDA graph)
	colls              []collective
	types              []comm.DType
	ops                []comm.ReduceOp
	root               int  // -1: every rank in turn
	sim                int  // ranks on the simulator; 0: real GPUs
	mpi                bool // one rank of an mpirun job: the MPI Communicator on host memory
	gpus               int  // GPUs to drive from this process; 0: every visible one
	json               bool
	timeout            time.Duration
	args               []string
}

// parseArgs reads nccl-tests' flags (plus -op, -dtype, -redop, -sim, -json) from args.
// Help goes to out and returns flag.ErrHelp.
func parseArgs(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("commbench", flag.ContinueOnError)
	fs.SetOutput(out)
	var (
		minB    = sizeFlag(32 << 20)
		maxB    = sizeFlag(32 << 20)
		step    = sizeFlag(1 << 20)
		factor  = fs.Int64("f", 1, "multiply the size by `factor` at each step (1: add -i instead)")
		iters   = fs.Int("n", 20, "timed `iterations` per size")
		warmup  = fs.Int("w", 1, "warm-up `iterations` at the largest and the smallest size")
		check   = fs.Int("c", 1, "check results against the host reference `N` times per size (0: no check)")
		op      = fs.String("op", "allreduce", "`collective`: allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv or all")
		dtype   = fs.String("dtype", "float", "element `type`: "+strings.Join(typeNames(), ", ")+" or all")
		redop   = fs.String("redop", "sum", "reduction `operator`: sum, prod, max, min, avg or all")
		root    = fs.Int("r", 0, "`root` of broadcast, reduce, gather and scatter (-1: every rank in turn)")
		sim     = fs.Int("sim", 0, "run `N` ranks on commtest's host-memory simulator instead of GPUs (SIMULATED: times are the software layers only)")
		gpus    = fs.Int("g", 0, "`ranks` to drive from this process, one per GPU (0: every visible GPU; more than the GPUs share them when NCCL_MULTI_RANK_GPU_ENABLE=1)")
		mpiRank = fs.Bool("mpi", false, "run as one rank of an mpirun job: comm's MPI Communicator on host memory (rank 0 prints)")
		jsonOut = fs.Bool("json", false, "write the results as JSON instead of the nccl-tests table")
		timeout = fs.Duration("T", 0, "give up after `duration` (0: no limit)")
		agg     = fs.Int("m", 1, "aggregate `N` operations in one group (GroupStart/GroupEnd) per timed iteration; the time is per operation")
		block   = fs.Int("z", 0, "blocking `mode`: "+blockingHelp)
		avg     = fs.Int("a", int(avgMean), "`mode` of the reported time: 0 rank 0's, 1 the average over the ranks, 2 their minimum, 3 their maximum")
		graphs  = fs.Int("G", 0, "capture the timed iterations in a CUDA graph and replay it `N` times (0: no graph)")
	)
	fs.Var(&minB, "b", "smallest `size` in bytes (K, M, G suffixes: 1024-based)")
	fs.Var(&maxB, "e", "largest `size` in bytes (K, M, G suffixes)")
	fs.Var(&step, "i", "step in `bytes` when -f is 1 (K, M, G suffixes)")
	fs.StringVar(dtype, "d", "float", "short for -dtype")
	fs.StringVar(redop, "o", "sum", "short for -redop")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: commbench [flags]\n\nnccl-tests for ncclgo: measures collectives through comm and prints nccl-tests' table.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	c := config{
		minBytes: int64(minB), maxBytes: int64(maxB), stepBytes: int64(step), stepFactor: *factor,
		iters: *iters, warmup: *warmup, check: *check, root: *root, sim: *sim, mpi: *mpiRank, gpus: *gpus,
		json: *jsonOut, timeout: *timeout, args: append([]string(nil), args...),
		aggIters: *agg, blocking: *block, average: average(*avg), graphs: *graphs,
	}
	var err error
	if c.colls, err = parseCollectives(*op); err != nil {
		return config{}, err
	}
	if c.types, err = parseTypes(*dtype); err != nil {
		return config{}, err
	}
	if c.ops, err = parseOps(*redop); err != nil {
		return config{}, err
	}
	return c, c.validate()
}

// validate checks the numbers of a parsed command line.
func (c config) validate() error {
	switch {
	case c.minBytes < 0:
		return fmt.Errorf("%w: -b %d: size is negative", errUsage, c.minBytes)
	case c.maxBytes < c.minBytes:
		return fmt.Errorf("%w: -e %d is smaller than -b %d", errUsage, c.maxBytes, c.minBytes)
	case c.stepFactor < 1:
		return fmt.Errorf("%w: -f %d: factor must be at least 1", errUsage, c.stepFactor)
	case c.stepFactor == 1 && c.stepBytes < 1:
		return fmt.Errorf("%w: -i %d: step must be at least 1 byte when -f is 1", errUsage, c.stepBytes)
	case c.stepFactor > 1 && c.minBytes == 0:
		return fmt.Errorf("%w: -b 0 with -f %d never grows: start at 1 byte or more", errUsage, c.stepFactor)
	case c.iters < 1:
		return fmt.Errorf("%w: -n %d: need at least 1 iteration", errUsage, c.iters)
	case c.warmup < 0:
		return fmt.Errorf("%w: -w %d: warm-up iterations are negative", errUsage, c.warmup)
	case c.check < 0:
		return fmt.Errorf("%w: -c %d: check count is negative", errUsage, c.check)
	case c.sim < 0:
		return fmt.Errorf("%w: -sim %d: rank count is negative", errUsage, c.sim)
	case c.mpi && c.sim > 0:
		return fmt.Errorf("%w: -mpi and -sim %d: choose one", errUsage, c.sim)
	case c.gpus < 0:
		return fmt.Errorf("%w: -g %d: GPU count is negative", errUsage, c.gpus)
	case c.root < -1:
		return fmt.Errorf("%w: -r %d: root must be a rank or -1 (every rank)", errUsage, c.root)
	case c.timeout < 0:
		return fmt.Errorf("%w: -T %v: timeout is negative", errUsage, c.timeout)
	case c.aggIters < 1:
		return fmt.Errorf("%w: -m %d: need at least 1 operation per iteration", errUsage, c.aggIters)
	case c.blocking < 0 || c.blocking > 3:
		return fmt.Errorf("%w: -z %d: want %s", errUsage, c.blocking, blockingHelp)
	case c.average < avgRank0 || c.average > avgMax:
		return fmt.Errorf("%w: -a %d: want 0 (rank 0), 1 (average), 2 (minimum) or 3 (maximum)", errUsage, int(c.average))
	case c.graphs < 0:
		return fmt.Errorf("%w: -G %d: graph launches are negative", errUsage, c.graphs)
	case c.iters > math.MaxInt32/c.aggIters/max(c.graphs, 1):
		return fmt.Errorf("%w: -n %d x -m %d x -G %d: more than %d operations per measurement", errUsage, c.iters, c.aggIters, c.graphs, math.MaxInt32)
	case (c.blocking == 1 || c.blocking == 2) && c.aggIters > 1:
		return fmt.Errorf("%w: -z %d with -m %d: the operations of a group complete at its end, so none can be waited for inside it (-z 3 waits after each group)", errUsage, c.blocking, c.aggIters)
	case c.blocking != 0 && c.graphs > 0:
		return fmt.Errorf("%w: -z %d with -G %d: a capture records the operations without running them, so none can be waited for", errUsage, c.blocking, c.graphs)
	case c.graphs > 0 && c.mpi:
		return fmt.Errorf("%w: -G %d with -mpi: MPI runs on the host and has no CUDA graph to capture into", errUsage, c.graphs)
	}
	return nil
}

// blockingHelp says what each -z mode does, as nccl-tests' blocking modes.
const blockingHelp = "0 (wait once per measurement), 1 (wait for every operation, then for every rank), 2 (wait for every operation), or 3 (wait for every iteration, then for every rank, the waits for the ranks left out of the time)"

// average is -a: how the reported time combines the ranks' times, as nccl-tests' -a.
type average int

const (
	avgRank0 average = iota // rank 0's time
	avgMean                 // the mean over the ranks (nccl-tests' default)
	avgMin                  // the fastest rank's
	avgMax                  // the slowest rank's
)

// String is the name of a in the header and the JSON output.
func (a average) String() string {
	switch a {
	case avgRank0:
		return "rank0"
	case avgMean:
		return "avg"
	case avgMin:
		return "min"
	case avgMax:
		return "max"
	}
	return fmt.Sprintf("average(%d)", int(a))
}

// sizes lists the message sizes from minBytes to maxBytes, as nccl-tests steps them.
func (c config) sizes() []int64 {
	var out []int64
	for s := c.minBytes; s <= c.maxBytes; {
		out = append(out, s)
		next := s + c.stepBytes
		if c.stepFactor > 1 {
			if s > math.MaxInt64/c.stepFactor {
				break
			}
			next = s * c.stepFactor
		}
		if next <= s {
			break
		}
		s = next
	}
	return out
}

// sizeFlag is a byte count with an optional K, M or G suffix (1024-based, like nccl-tests).
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

// parseSize reads "8", "64K", "1.5M", "2G" (1024-based, either case) as bytes.
func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	mult := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		}
		if mult != 1 {
			t = strings.TrimSpace(t[:len(t)-1])
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M or G suffix", v)
	}
	b := f * mult
	if b < 0 || b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: out of range", v)
	}
	return int64(b), nil
}

// typeInfo names a comm.DType the way nccl-tests prints it, with the names accepted on
// the command line.
var typeInfo = []struct {
	t     comm.DType
	name  string // nccl-tests' name, printed in the type column
	alias []string
}{
	{comm.Int8, "int8", []string{"char"}},
	{comm.Uint8, "uint8", nil},
	{comm.Int32, "int32", []string{"int"}},
	{comm.Uint32, "uint32", nil},
	{comm.Int64, "int64", nil},
	{comm.Uint64, "uint64", nil},
	{comm.Float16, "half", []string{"float16", "fp16"}},
	{comm.Float32, "float", []string{"float32", "fp32"}},
	{comm.Float64, "double", []string{"float64", "fp64"}},
	{comm.BFloat16, "bfloat16", []string{"bf16"}},
	{comm.Float8E4M3, "f8e4m3", []string{"float8e4m3", "fp8e4m3"}},
	{comm.Float8E5M2, "f8e5m2", []string{"float8e5m2", "fp8e5m2"}},
}

func typeNames() []string {
	out := make([]string, len(typeInfo))
	for i, ti := range typeInfo {
		out[i] = ti.name
	}
	return out
}

// typeName is nccl-tests' name of t.
func typeName(t comm.DType) string {
	for _, ti := range typeInfo {
		if ti.t == t {
			return ti.name
		}
	}
	return t.String()
}

func parseTypes(v string) ([]comm.DType, error) {
	if v == "all" {
		out := make([]comm.DType, len(typeInfo))
		for i, ti := range typeInfo {
			out[i] = ti.t
		}
		return out, nil
	}
	for _, ti := range typeInfo {
		if v == ti.name {
			return []comm.DType{ti.t}, nil
		}
		for _, a := range ti.alias {
			if v == a {
				return []comm.DType{ti.t}, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: -dtype %q: unknown type; want %s or all", errUsage, v, strings.Join(typeNames(), ", "))
}

var allOps = []comm.ReduceOp{comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg}

func parseOps(v string) ([]comm.ReduceOp, error) {
	if v == "all" {
		return append([]comm.ReduceOp(nil), allOps...), nil
	}
	for _, op := range allOps {
		if v == op.String() {
			return []comm.ReduceOp{op}, nil
		}
	}
	return nil, fmt.Errorf("%w: -redop %q: unknown reduction; want sum, prod, max, min, avg or all", errUsage, v)
}

func parseCollectives(v string) ([]collective, error) {
	if v == "all" {
		return append([]collective(nil), collectives...), nil
	}
	key := strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(v))
	for _, c := range collectives {
		if key == strings.ReplaceAll(c.name, "_", "") {
			return []collective{c}, nil
		}
	}
	hint := ""
	if _, err := parseOps(v); err == nil {
		hint = " (the reduction operator is -redop)"
	}
	return nil, fmt.Errorf("%w: -op %q: unknown collective; want allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv or all%s", errUsage, v, hint)
}
