package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

func TestParseSizeAcceptsNCCLTestsSuffixes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"8", 8},
		{"0", 0},
		{" 64 ", 64},
		{"1K", 1024},
		{"1k", 1024},
		{"1.5M", 3 << 19},
		{"128M", 128 << 20},
		{"2g", 2 << 30},
		{"2 G", 2 << 30},
		{"1e3", 1000},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseSizeRejectsWhatIsNotASize(t *testing.T) {
	for _, in := range []string{"", "K", "abc", "1T", "-1", "-2K", "NaN", "Inf", "1e30", "8B"} {
		t.Run(in, func(t *testing.T) {
			_, err := parseSize(in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "size "+`"`+in+`"`)
		})
	}
}

func TestParseArgsDefaultsAreNCCLTests(t *testing.T) {
	c, err := parseArgs(nil, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, int64(32<<20), c.minBytes)
	assert.Equal(t, int64(32<<20), c.maxBytes)
	assert.Equal(t, int64(1<<20), c.stepBytes)
	assert.Equal(t, int64(1), c.stepFactor)
	assert.Equal(t, 20, c.iters)
	assert.Equal(t, 1, c.warmup)
	assert.Equal(t, 1, c.check)
	assert.Equal(t, 0, c.root)
	assert.Equal(t, []comm.DType{comm.Float32}, c.types)
	assert.Equal(t, []comm.ReduceOp{comm.Sum}, c.ops)
	require.Len(t, c.colls, 1)
	assert.Equal(t, "all_reduce", c.colls[0].name)
	assert.False(t, c.json)
	assert.Equal(t, 0, c.sim)
}

func TestParseArgsReadsEveryFlag(t *testing.T) {
	args := []string{"-b", "8", "-e", "1M", "-f", "4", "-i", "3", "-n", "7", "-w", "0", "-c", "2",
		"-op", "reduce_scatter", "-dtype", "bf16", "-redop", "max", "-r", "-1", "-sim", "3", "-g", "2", "-json", "-T", "90s",
		"-m", "5", "-a", "3", "-G", "4"}
	c, err := parseArgs(args, &bytes.Buffer{})
	require.NoError(t, err)
	require.Len(t, c.colls, 1)
	assert.Equal(t, "reduce_scatter", c.colls[0].name)
	c.colls = nil // collectives hold functions, which do not compare
	assert.Equal(t, config{
		minBytes: 8, maxBytes: 1 << 20, stepBytes: 3, stepFactor: 4, iters: 7, warmup: 0, check: 2,
		types: []comm.DType{comm.BFloat16}, ops: []comm.ReduceOp{comm.Max},
		root: -1, sim: 3, gpus: 2, json: true, timeout: 90 * time.Second, args: args,
		aggIters: 5, average: avgMax, graphs: 4,
	}, c)
}

func TestParseArgsTimingModes(t *testing.T) {
	tests := []struct {
		args     []string
		agg      int
		blocking int
		avg      average
		graphs   int
	}{
		{nil, 1, 0, avgMean, 0}, // nccl-tests' defaults
		{[]string{"-m", "8"}, 8, 0, avgMean, 0},
		{[]string{"-z", "1"}, 1, 1, avgMean, 0},
		{[]string{"-z", "0", "-m", "2"}, 2, 0, avgMean, 0},
		{[]string{"-a", "0"}, 1, 0, avgRank0, 0},
		{[]string{"-a", "2"}, 1, 0, avgMin, 0},
		{[]string{"-a", "3", "-G", "10", "-m", "3"}, 3, 0, avgMax, 10},
		{[]string{"-G", "0", "-mpi"}, 1, 0, avgMean, 0},
		{[]string{"-z", "1", "-mpi", "-a", "0"}, 1, 1, avgRank0, 0},
		{[]string{"-z", "2"}, 1, 2, avgMean, 0},
		{[]string{"-z", "3", "-m", "4"}, 4, 3, avgMean, 0},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseArgs(tc.args, &bytes.Buffer{})
			require.NoError(t, err)
			assert.Equal(t, tc.agg, c.aggIters)
			assert.Equal(t, tc.blocking, c.blocking)
			assert.Equal(t, tc.avg, c.average)
			assert.Equal(t, tc.graphs, c.graphs)
		})
	}
}

func TestParseArgsNamesAndAliases(t *testing.T) {
	tests := []struct {
		args  []string
		colls []string
		types []comm.DType
		ops   []comm.ReduceOp
	}{
		{[]string{"-op", "allgather"}, []string{"all_gather"}, []comm.DType{comm.Float32}, []comm.ReduceOp{comm.Sum}},
		{[]string{"-op", "all-reduce", "-d", "half", "-o", "prod"}, []string{"all_reduce"}, []comm.DType{comm.Float16}, []comm.ReduceOp{comm.Prod}},
		{[]string{"-op", "SendRecv", "-dtype", "float8e4m3"}, []string{"sendrecv"}, []comm.DType{comm.Float8E4M3}, []comm.ReduceOp{comm.Sum}},
		{[]string{"-op", "all", "-dtype", "all", "-redop", "all"},
			[]string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv"},
			[]comm.DType{comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64, comm.Float16, comm.Float32, comm.Float64, comm.BFloat16, comm.Float8E4M3, comm.Float8E5M2},
			[]comm.ReduceOp{comm.Sum, comm.Prod, comm.Max, comm.Min, comm.Avg}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseArgs(tc.args, &bytes.Buffer{})
			require.NoError(t, err)
			var names []string
			for _, cl := range c.colls {
				names = append(names, cl.name)
			}
			assert.Equal(t, tc.colls, names)
			assert.Equal(t, tc.types, c.types)
			assert.Equal(t, tc.ops, c.ops)
		})
	}
}

func TestParseArgsRejectsBadCommandLines(t *testing.T) {
	tests := []struct {
		args []string
		err  string
	}{
		{[]string{"-b", "1K", "-e", "8"}, "-e 8 is smaller than -b 1024"},
		{[]string{"-f", "0"}, "-f 0: factor must be at least 1"},
		{[]string{"-f", "1", "-i", "0"}, "-i 0: step must be at least 1 byte when -f is 1"},
		{[]string{"-b", "0", "-f", "2"}, "-b 0 with -f 2 never grows"},
		{[]string{"-n", "0"}, "-n 0: need at least 1 iteration"},
		{[]string{"-w", "-1"}, "-w -1: warm-up iterations are negative"},
		{[]string{"-c", "-1"}, "-c -1: check count is negative"},
		{[]string{"-sim", "-2"}, "-sim -2: rank count is negative"},
		{[]string{"-g", "-1"}, "-g -1: GPU count is negative"},
		{[]string{"-r", "-2"}, "-r -2: root must be a rank or -1"},
		{[]string{"-T", "-1s"}, "-T -1s: timeout is negative"},
		{[]string{"-op", "sum"}, `-op "sum": unknown collective; want allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv or all (the reduction operator is -redop)`},
		{[]string{"-op", "alltoallv"}, `-op "alltoallv": unknown collective`},
		{[]string{"-dtype", "quad"}, `-dtype "quad": unknown type; want int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, f8e4m3, f8e5m2 or all`},
		{[]string{"-redop", "xor"}, `-redop "xor": unknown reduction`},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"-m", "0"}, "-m 0: need at least 1 operation per iteration"},
		{[]string{"-m", "-3"}, "-m -3: need at least 1 operation per iteration"},
		{[]string{"-z", "-1"}, "-z -1: want 0 (wait once per measurement), 1 (wait for every operation, then for every rank), 2 (wait for every operation), or 3"},
		{[]string{"-z", "4"}, "-z 4: want 0 (wait once per measurement)"},
		{[]string{"-a", "-1"}, "-a -1: want 0 (rank 0), 1 (average), 2 (minimum) or 3 (maximum)"},
		{[]string{"-a", "4"}, "-a 4: want 0 (rank 0), 1 (average), 2 (minimum) or 3 (maximum)"},
		{[]string{"-G", "-1"}, "-G -1: graph launches are negative"},
		{[]string{"-z", "1", "-m", "4"}, "-z 1 with -m 4: the operations of a group complete at its end, so none can be waited for inside it (-z 3 waits after each group)"},
		{[]string{"-z", "2", "-m", "2"}, "-z 2 with -m 2: the operations of a group complete at its end"},
		{[]string{"-z", "1", "-G", "2", "-sim", "2"}, "-z 1 with -G 2: a capture records the operations without running them"},
		{[]string{"-z", "3", "-G", "1", "-sim", "2"}, "-z 3 with -G 1: a capture records the operations without running them"},
		{[]string{"-G", "1", "-mpi"}, "-G 1 with -mpi: MPI runs on the host and has no CUDA graph to capture into"},
		{[]string{"-n", "100000", "-m", "100000"}, "-n 100000 x -m 100000 x -G 0: more than 2147483647 operations per measurement"},
		{[]string{"-n", "2000", "-m", "1000", "-G", "1073742"}, "-n 2000 x -m 1000 x -G 1073742: more than"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseArgs(tc.args, &bytes.Buffer{})
			require.Error(t, err)
			assert.ErrorIs(t, err, errUsage)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

func TestParseArgsFlagErrors(t *testing.T) {
	var out bytes.Buffer
	_, err := parseArgs([]string{"-b", "lots"}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `invalid value "lots" for flag -b: size "lots"`)
	for _, f := range []string{"-m", "-z", "-a", "-G"} {
		_, err = parseArgs([]string{f, "two"}, &out)
		require.Error(t, err, f)
		assert.Contains(t, err.Error(), `invalid value "two" for flag `+f, f)
	}

	out.Reset()
	_, err = parseArgs([]string{"-h"}, &out)
	assert.True(t, errors.Is(err, flag.ErrHelp))
	assert.Contains(t, out.String(), "usage: commbench [flags]")
	assert.Contains(t, out.String(), "-sim N")
}

func TestSizesStepLikeNCCLTests(t *testing.T) {
	tests := []struct {
		name       string
		b, e, f, i int64
		want       []int64
	}{
		{"factor 2", 8, 64, 2, 1, []int64{8, 16, 32, 64}},
		{"factor stops below the maximum", 8, 100, 2, 1, []int64{8, 16, 32, 64}},
		{"one size", 32 << 20, 32 << 20, 1, 1 << 20, []int64{32 << 20}},
		{"step bytes from zero", 0, 30, 1, 10, []int64{0, 10, 20, 30}},
		{"huge factor does not overflow", 1 << 40, 1 << 61, 1 << 30, 1, []int64{1 << 40}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := config{minBytes: tc.b, maxBytes: tc.e, stepFactor: tc.f, stepBytes: tc.i}
			assert.Equal(t, tc.want, c.sizes())
		})
	}
}

func TestTestsExpandTypesOpsAndRoots(t *testing.T) {
	c := config{types: []comm.DType{comm.Float32, comm.Int8}, ops: []comm.ReduceOp{comm.Sum, comm.Max}, root: -1}
	byName := map[string]collective{}
	for _, cl := range collectives {
		byName[cl.name] = cl
	}
	assert.Len(t, c.tests(byName["all_reduce"], 3), 4) // 2 types x 2 ops
	assert.Len(t, c.tests(byName["all_gather"], 3), 2) // no operator
	bc := c.tests(byName["broadcast"], 3)              // 2 types x 3 roots
	require.Len(t, bc, 6)
	assert.Equal(t, []int{0, 1, 2}, []int{bc[0].root, bc[1].root, bc[2].root})
	assert.Equal(t, "none", bc[0].opName())
	c.root = 1
	assert.Len(t, c.tests(byName["broadcast"], 3), 2)
	assert.Equal(t, -1, c.tests(byName["sendrecv"], 3)[0].root)
}
