package main

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

func collNamed(t *testing.T, name string) collective {
	t.Helper()
	for _, c := range collectives {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no collective %q", name)
	return collective{}
}

// The formulas of ../shared/facts/nccl-semantics.md: algbw = S / t, busbw = algbw x
// factor, S and factor per operation. One million 4-byte elements per rank on 4 ranks
// in one millisecond.
func TestBandwidthFormulas(t *testing.T) {
	const count, elem, n, sec = 1_000_000, 4, 4, 1e-3
	tests := []struct {
		coll          string
		bytes, factor float64 // S and busbw/algbw from the table
	}{
		{"all_reduce", count * elem, 2 * (n - 1) / float64(n)},
		{"all_gather", count * elem * n, (n - 1) / float64(n)},
		{"reduce_scatter", count * elem * n, (n - 1) / float64(n)},
		{"broadcast", count * elem, 1},
		{"sendrecv", count * elem, 1},
	}
	for _, tc := range tests {
		t.Run(tc.coll, func(t *testing.T) {
			alg, bus := collNamed(t, tc.coll).bandwidth(count, elem, n, sec)
			assert.InDelta(t, tc.bytes/1e9/sec, alg, 1e-9)
			assert.InDelta(t, tc.bytes/1e9/sec*tc.factor, bus, 1e-9)
		})
	}
	alg, bus := collNamed(t, "all_reduce").bandwidth(count, elem, 1, sec)
	assert.InDelta(t, 4.0, alg, 1e-9)
	assert.Zero(t, bus, "one rank moves nothing over the bus")
	alg, bus = collNamed(t, "all_reduce").bandwidth(count, elem, n, 0)
	assert.Zero(t, alg)
	assert.Zero(t, bus)
}

func TestLayoutsFollowNCCLTests(t *testing.T) {
	tests := []struct {
		coll       string
		count, n   int64
		want       layout
		sizeColumn int64 // bytes, 4-byte elements
	}{
		{"all_reduce", 10, 4, layout{send: 10, recv: 10, param: 10}, 40},
		{"all_gather", 10, 4, layout{send: 2, recv: 8, param: 2, sendInPlace: 2}, 32},
		{"reduce_scatter", 10, 4, layout{send: 8, recv: 2, param: 2, recvInPlace: 2}, 32},
		{"broadcast", 10, 4, layout{send: 10, recv: 10, param: 10}, 40},
		{"sendrecv", 10, 4, layout{send: 10, recv: 10, param: 10}, 40},
		{"all_gather", 3, 4, layout{}, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s %d on %d", tc.coll, tc.count, tc.n), func(t *testing.T) {
			l := collNamed(t, tc.coll).layout(tc.count, tc.n)
			assert.Equal(t, tc.want, l)
			assert.Equal(t, tc.sizeColumn, l.bytes(4))
		})
	}
}

func TestFixedWidthNumbersLikeNCCLTests(t *testing.T) {
	tests := []struct {
		v     float64
		width int
		want  string
	}{
		{0, 6, "  0.00"},
		{0.004, 6, "  0.00"},
		{18.354, 7, "  18.35"},
		{123.456, 7, " 123.46"},
		{9999.99, 7, "9999.99"},
		{12345.6, 7, "12345.6"},
		{123456.7, 7, " 123457"},
		{1234567, 7, "1234567"},
		{12345678, 7, "1.2e+07"},
		{123.45, 6, "123.45"},
		{1234.5, 6, "1234.5"},
		{123456, 6, "123456"},
		{1234567, 6, " 1e+06"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.v, "/", tc.width), func(t *testing.T) {
			got := fixed(tc.v, tc.width)
			assert.Equal(t, tc.want, got)
			assert.Len(t, got, tc.width)
		})
	}
}

func ptr(v int64) *int64 { return &v }

func TestTableLinesMatchNCCLTestsColumns(t *testing.T) {
	var out bytes.Buffer
	o := &textOut{w: &out}
	o.header(collNamed(t, "all_gather"))
	o.row(row{Size: 1048576, Count: 131072, Type: "float", RedOp: "none", Root: -1,
		OutOfPlace: &measure{TimeUS: 25.41, AlgBW: 41.27, BusBW: 30.95, Wrong: ptr(0)},
		InPlace:    &measure{TimeUS: 24.9, AlgBW: 42.11, BusBW: 31.58, Wrong: ptr(3)}})
	o.row(row{Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
		InPlace: &measure{TimeUS: 12345.6, AlgBW: 0, BusBW: 0}})
	tbl := &table{Collective: "all_gather", OutOfBounds: 1, AvgBusBW: 31.265}
	o.footer(tbl)
	require.NoError(t, o.err)
	want := []string{
		"# Collective test starting: all_gather",
		"#",
		"#                                                              out-of-place                       in-place",
		"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
		"#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)",
		"     1048576        131072     float    none      -1    25.41   41.27   30.95       0    24.90   42.11   31.58       3",
		"           8             2     float     sum      -1      N/A     N/A     N/A     N/A  12345.6    0.00    0.00     N/A",
		"# Out of bounds values : 1 FAILED",
		"# Avg bus bandwidth    : 31.265",
		"#",
		"# Collective test concluded: all_gather",
		"#",
	}
	assert.Equal(t, want, strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"))
}

func TestOneFormOnlyCollectivesSaySo(t *testing.T) {
	var out bytes.Buffer
	(&textOut{w: &out}).header(collNamed(t, "alltoall"))
	assert.Contains(t, out.String(), "# comm's alltoall needs separate send and receive buffers: in-place columns are N/A\n")
	for _, name := range []string{"broadcast", "all_reduce", "sendrecv"} {
		out.Reset()
		(&textOut{w: &out}).header(collNamed(t, name))
		assert.NotContains(t, out.String(), "N/A\n", name)
	}
}

func TestSimulatedOutputMarksEveryLine(t *testing.T) {
	var out bytes.Buffer
	o := &textOut{w: &out, sim: true}
	w := &world{ranks: make([]rank, 2), simulated: true, devices: []string{"Rank  0 sim", "Rank  1 sim"}}
	o.preamble(config{minBytes: 8, maxBytes: 64, stepFactor: 2, iters: 5, warmup: 1, check: 1, aggIters: 1, average: avgMean}, "(devel)", w)
	o.header(collNamed(t, "all_reduce"))
	o.row(row{Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1, InPlace: &measure{TimeUS: 3, Wrong: ptr(0)}})
	o.footer(&table{Collective: "all_reduce"})
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Greater(t, len(lines), 15)
	for _, l := range lines {
		assert.True(t, strings.HasSuffix(l, "  SIMULATED"), l)
	}
	assert.Contains(t, out.String(), "# SIMULATED: 2 ranks of comm's NCCL backend on commtest's host-memory simulator")
	assert.Contains(t, out.String(), "# nThread 1 nGpus 2 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 1 iters: 5 agg iters: 1 validation: 1 graph: 0  SIMULATED\n")
	assert.Contains(t, out.String(), "\n# Out of bounds values : 0 OK  SIMULATED\n")
	assert.Contains(t, out.String(), "\n#  Rank  1 sim  SIMULATED\n")
}

func TestTableFooterFigures(t *testing.T) {
	tbl := &table{}
	tbl.add(row{OutOfPlace: &measure{BusBW: 10, Wrong: ptr(0)}, InPlace: &measure{BusBW: 20, Wrong: ptr(2)}})
	tbl.add(row{InPlace: &measure{BusBW: 30}}) // unchecked, no out-of-place form
	assert.Equal(t, 1, tbl.OutOfBounds)
	assert.InDelta(t, 20.0, tbl.AvgBusBW, 1e-12)
	assert.Len(t, tbl.Rows, 2)
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, fmt.Errorf("pipe closed")
	}
	f.n--
	return len(p), nil
}

func TestTextOutKeepsTheFirstWriteError(t *testing.T) {
	o := &textOut{w: &failWriter{n: 1}}
	o.line("first")
	o.line("second")
	o.line("third")
	assert.EqualError(t, o.err, "pipe closed")
}

func TestProgressWaitsThenThrottles(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	p := &progress{w: &out, quiet: 2 * time.Second, interval: time.Second, now: func() time.Time { return now }}
	p.start = now
	s := test{coll: collNamed(t, "all_reduce"), t: comm.Float32, op: comm.Sum}

	p.update(s, 8, 0, 4)
	assert.Empty(t, out.String(), "quiet at first")
	now = now.Add(3 * time.Second)
	p.update(s, 16, 1, 4)
	now = now.Add(500 * time.Millisecond)
	p.update(s, 32, 2, 4)
	now = now.Add(time.Second)
	p.update(s, 64, 3, 4)
	assert.Equal(t, "commbench: all_reduce float sum: 16 bytes, size 2 of 4, 3s elapsed\n"+
		"commbench: all_reduce float sum: 64 bytes, size 4 of 4, 5s elapsed\n", out.String())
	p.done() // not a terminal: nothing to clear
	assert.NotContains(t, out.String(), "\r")

	out.Reset()
	p.tty = true
	now = now.Add(2 * time.Second)
	p.update(s, 128, 0, 1)
	p.done()
	assert.Equal(t, "\r\033[Kcommbench: all_reduce float sum: 128 bytes, size 1 of 1, 7s elapsed\r\033[K", out.String())
	var nilProgress *progress
	nilProgress.update(s, 8, 0, 1) // a run without progress reporting
	nilProgress.done()
}

func TestReferenceIsExactInEveryType(t *testing.T) {
	for _, ti := range typeInfo {
		for _, op := range allOps {
			for _, n := range []int{1, 2, 3, 4, 8} {
				buf := make([]byte, ti.t.Size())
				for i := range int64(2 * n * 97) {
					want := reduce(ti.t, op, n, i)
					encode(ti.t, buf, 0, want)
					got := decode(ti.t, buf, 0)
					if op == comm.Avg && isFloat(ti.t) {
						require.InDelta(t, want, got, tolerance(ti.t, op, n, want), "%s %s n=%d i=%d", ti.name, op, n, i)
						continue
					}
					require.Equal(t, want, got, "%s %s n=%d i=%d: the reference is not representable", ti.name, op, n, i)
					for r := range n {
						v := input(ti.t, op, n, r, i)
						encode(ti.t, buf, 0, v)
						require.Equal(t, v, decode(ti.t, buf, 0), "%s input", ti.name)
					}
				}
			}
		}
	}
}

func TestInputsVaryAndReduceAsTheOperatorSays(t *testing.T) {
	// Four ranks of float: inputs (r+i) mod 97, products exactly 2.
	assert.Equal(t, 0+1+2+3.0, reduce(comm.Float32, comm.Sum, 4, 0))
	assert.Equal(t, 5+6+7+8.0, reduce(comm.Float32, comm.Sum, 4, 5))
	assert.Equal(t, 8.0, reduce(comm.Float32, comm.Max, 4, 5))
	assert.Equal(t, 5.0, reduce(comm.Float32, comm.Min, 4, 5))
	assert.Equal(t, 6.5, reduce(comm.Float32, comm.Avg, 4, 5))
	assert.Equal(t, 6.0, reduce(comm.Int32, comm.Avg, 4, 5), "integer avg divides the integer sum")
	assert.Equal(t, 2.0, reduce(comm.Int8, comm.Prod, 4, 5))
	// Narrow types use fewer distinct values so sums stay exact.
	assert.Equal(t, int64(2), modulus(comm.Float8E5M2, 8))
	assert.Equal(t, int64(64), modulus(comm.Int8, 2))
	assert.Equal(t, int64(97), modulus(comm.Float32, 8))
}

func TestPoisonIsNeverAReferenceValue(t *testing.T) {
	for _, ti := range typeInfo {
		buf := make([]byte, 4*ti.t.Size())
		poison(buf)
		got := decode(ti.t, buf, 2)
		assert.True(t, math.IsNaN(got) || got < 0 || got > 97, "%s poison decodes to %v", ti.name, got)
		bad := wrong(ti.t, comm.Sum, 2, buf, func(int64) float64 { return 1 })
		assert.Equal(t, int64(4), bad, ti.name)
	}
}

func TestWrongCountsMismatchedElements(t *testing.T) {
	for _, ti := range typeInfo {
		buf := make([]byte, 10*ti.t.Size())
		want := func(i int64) float64 { return reduce(ti.t, comm.Sum, 2, i) }
		for i := range int64(10) {
			encode(ti.t, buf, i, want(i))
		}
		assert.Zero(t, wrong(ti.t, comm.Sum, 2, buf, want), ti.name)
		encode(ti.t, buf, 3, want(3)+1)
		encode(ti.t, buf, 7, want(7)+2)
		assert.Equal(t, int64(2), wrong(ti.t, comm.Sum, 2, buf, want), ti.name)
	}
}
