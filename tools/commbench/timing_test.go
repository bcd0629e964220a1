package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
)

// simBench parses args (which must hold -sim), runs bench on a fresh simulator world
// whose ranks wrap can replace, and hands the ranks (before wrapping) to inspect
// before the world is closed.
func simBench(t *testing.T, args []string, wrap func(i int, r *simRank) rank, inspect func(ranks []*simRank)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, err := parseArgs(args, io.Discard)
	require.NoError(t, err)
	require.Positive(t, cfg.sim)
	w, err := openSim(ctx, cfg.sim)
	require.NoError(t, err)
	defer func() { assert.NoError(t, w.close()) }()
	sims := make([]*simRank, len(w.ranks))
	for i, r := range w.ranks {
		sims[i] = r.(*simRank)
		if wrap != nil {
			w.ranks[i] = wrap(i, sims[i])
		}
	}
	var out bytes.Buffer
	rep, err := bench(ctx, cfg, w, &out, newProgress(io.Discard))
	require.NoError(t, err)
	assert.Zero(t, rep.OutOfBounds, out.String())
	if inspect != nil {
		inspect(sims)
	}
	return out.String()
}

// TestAggregationGroupsEveryIteration: with -m N each timed iteration's N operations
// reach the simulated NCCL as one submitted group; without it none is grouped (an
// all-reduce) or each send/recv pair is its own group.
func TestAggregationGroupsEveryIteration(t *testing.T) {
	const iters = 3
	tests := []struct {
		op, call string
		agg      int
		submits  int64 // per rank: groups submitted
	}{
		{"allreduce", "ncclAllReduce", 1, 0},
		{"allreduce", "ncclAllReduce", 4, 2 * iters},
		{"alltoall", "ncclAlltoAll", 3, iters}, // in-place alltoall is N/A: one form
		{"sendrecv", "ncclSend", 1, 2 * iters},
		{"sendrecv", "ncclSend", 5, 2 * iters},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s -m %d", tc.op, tc.agg), func(t *testing.T) {
			args := []string{"-sim", "2", "-op", tc.op, "-b", "64", "-e", "64", "-n", fmt.Sprint(iters), "-w", "0", "-c", "0",
				"-m", fmt.Sprint(tc.agg)}
			forms := int64(2)
			if tc.op == "alltoall" {
				forms = 1
			}
			out := simBench(t, args, nil, func(ranks []*simRank) {
				for _, r := range ranks {
					calls, err := r.c.Calls(r.rank, tc.call)
					require.NoError(t, err)
					assert.Equal(t, forms*iters*int64(tc.agg), calls, "rank %d: %s calls", r.rank, tc.call)
					submits, err := r.c.Submits(r.rank)
					require.NoError(t, err)
					assert.Equal(t, tc.submits, submits, "rank %d: groups submitted", r.rank)
				}
			})
			assert.Contains(t, out, fmt.Sprintf("agg iters: %d validation: 0 graph: 0  SIMULATED\n", tc.agg))
		})
	}
}

// eventLog records, in one order over every rank, what commbench asks of the
// communicators.
type eventLog struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	rank int
	what string // "op", "sync" (when Sync has returned), "group-start", "group-end"
}

func (l *eventLog) add(rank int, what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{rank, what})
}

// spyComm logs the all-reduces, waits and groups of one rank, then makes them.
type spyComm struct {
	comm.Communicator
	rank int
	log  *eventLog
}

func (c spyComm) AllReduce(p comm.DevicePtr, n int, t comm.DType, op comm.ReduceOp) error {
	c.log.add(c.rank, "op")
	return c.Communicator.AllReduce(p, n, t, op)
}

func (c spyComm) AllReduceInto(s, r comm.DevicePtr, n int, t comm.DType, op comm.ReduceOp) error {
	c.log.add(c.rank, "op")
	return c.Communicator.AllReduceInto(s, r, n, t, op)
}

func (c spyComm) Sync(ctx context.Context) error {
	err := c.Communicator.Sync(ctx)
	c.log.add(c.rank, "sync")
	return err
}

func (c spyComm) GroupStart() error {
	c.log.add(c.rank, "group-start")
	return c.Communicator.GroupStart()
}

func (c spyComm) GroupEnd() error {
	c.log.add(c.rank, "group-end")
	return c.Communicator.GroupEnd()
}

// spyRank is a simulated rank whose communicator is spied on.
type spyRank struct {
	*simRank
	log *eventLog
}

func (r spyRank) Comm() comm.Communicator {
	return spyComm{Communicator: r.simRank.Comm(), rank: r.rank, log: r.log}
}

// sequence is rank's events, joined by spaces.
func (l *eventLog) sequence(rank int) string {
	var s []string
	for _, e := range l.events {
		if e.rank == rank {
			s = append(s, e.what)
		}
	}
	return strings.Join(s, " ")
}

func TestBlockingWaitsForEveryOperationAndRank(t *testing.T) {
	tests := []struct {
		args    []string
		want    string // each rank's events in one timed pass
		barrier bool   // every rank waits for the others after each wait
	}{
		{[]string{"-z", "0"}, "op op op sync", false},
		{[]string{"-z", "1"}, "op sync op sync op sync sync", true},
		{[]string{"-z", "2"}, "op sync op sync op sync sync", false},
		{[]string{"-z", "3"}, "op sync op sync op sync sync", true},
		{[]string{"-m", "2"}, "group-start op op group-end group-start op op group-end group-start op op group-end sync", false},
		{[]string{"-z", "3", "-m", "2"}, "group-start op op group-end sync group-start op op group-end sync group-start op op group-end sync sync", true},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			log := &eventLog{}
			args := append([]string{"-sim", "3", "-b", "64", "-e", "64", "-n", "3", "-w", "0", "-c", "0"}, tc.args...)
			simBench(t, args, func(_ int, r *simRank) rank { return spyRank{r, log} }, nil)
			for rank := range 3 {
				// Out of place, then in place.
				assert.Equal(t, tc.want+" "+tc.want, log.sequence(rank), "rank %d", rank)
			}
			if !tc.barrier {
				return
			}
			// No rank starts iteration k+1 before every rank has waited for its
			// iteration k.
			done := map[int]int{} // rank: completed waits
			started := map[int]int{}
			first := "op"
			if strings.HasPrefix(tc.want, "group-start") {
				first = "group-start"
			}
			for i, e := range log.events {
				switch e.what {
				case "sync":
					done[e.rank]++
				case first:
					for other := range 3 {
						assert.GreaterOrEqual(t, done[other], started[e.rank], "event %d: rank %d starts its iteration %d before rank %d has waited for its own", i, e.rank, started[e.rank]+1, other)
					}
					started[e.rank]++
				}
			}
		})
	}
}

// launchCounter is a simulated rank whose graphs count their launches.
type launchCounter struct {
	*simRank
	mu       sync.Mutex
	launches int
}

func (r *launchCounter) Capture(record func(c comm.Communicator) error) (graph, error) {
	g, err := r.simRank.Capture(record)
	if err != nil {
		return nil, err
	}
	return countedGraph{graph: g, r: r}, nil
}

type countedGraph struct {
	graph
	r *launchCounter
}

func (g countedGraph) Launch() error {
	g.r.mu.Lock()
	g.r.launches++
	g.r.mu.Unlock()
	return g.graph.Launch()
}

// TestGraphCapturesOnceAndReplays: with -G N the iterations' operations reach the
// simulated NCCL once, during the capture (grouped as -m says), the graph is launched
// N times per measurement, and the results the captured graph computes are checked.
func TestGraphCapturesOnceAndReplays(t *testing.T) {
	tests := []struct {
		args           []string
		calls, submits int64 // per rank, over both forms
		launches       int
	}{
		// 2 iterations x 3 operations per form, captured once and launched 5 times.
		{[]string{"-G", "5", "-m", "3", "-c", "0"}, 2 * 2 * 3, 2 * 2, 2 * 5},
		{[]string{"-G", "4", "-c", "0"}, 2 * 2, 0, 2 * 4},
		// -c 2: each form's check captures one operation and launches it once, twice
		// (simBench fails on a wrong element).
		{[]string{"-G", "3", "-c", "2"}, 2*2 + 2*2, 0, 2*3 + 2*2},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			counters := make([]*launchCounter, 2)
			args := append([]string{"-sim", "2", "-b", "64", "-e", "64", "-n", "2", "-w", "0"}, tc.args...)
			out := simBench(t, args, func(i int, r *simRank) rank {
				counters[i] = &launchCounter{simRank: r}
				return counters[i]
			}, func(ranks []*simRank) {
				for _, r := range ranks {
					calls, err := r.c.Calls(r.rank, "ncclAllReduce")
					require.NoError(t, err)
					assert.Equal(t, tc.calls, calls, "rank %d: all-reduces given to NCCL", r.rank)
					submits, err := r.c.Submits(r.rank)
					require.NoError(t, err)
					assert.Equal(t, tc.submits, submits, "rank %d: groups submitted", r.rank)
				}
			})
			for i, c := range counters {
				assert.Equal(t, tc.launches, c.launches, "rank %d: graph launches", i)
			}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				require.True(t, strings.HasSuffix(l, "  SIMULATED"), "unmarked line %q", l)
			}
		})
	}
}

// TestGraphNeedsAWorldThatCaptures: a rank that cannot capture is refused before
// anything is measured.
func TestGraphNeedsAWorldThatCaptures(t *testing.T) {
	open := func(ctx context.Context, c config) (*world, error) {
		w, err := openSim(ctx, c.sim)
		if err == nil {
			w.ranks[1] = corrupt{w.ranks[1]} // hides simRank's Capture
		}
		return w, err
	}
	out, errOut, code := runCommbench(t, open, "-sim", "2", "-b", "64", "-e", "64", "-n", "1", "-G", "2")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "commbench: -G 2: rank 1 (Rank  1 Group  0")
	assert.Contains(t, errOut, "cannot capture into a CUDA graph")
	assert.NotContains(t, out, "Collective test starting")
}

func TestCombinePicksRankZeroMeanMinOrMax(t *testing.T) {
	times := []float64{3e-6, 1e-6, 8e-6, 4e-6} // rank 0 is neither the fastest nor the slowest
	tests := []struct {
		a    average
		want float64
	}{
		{avgRank0, 3e-6},
		{avgMean, 4e-6},
		{avgMin, 1e-6},
		{avgMax, 8e-6},
	}
	for _, tc := range tests {
		t.Run(tc.a.String(), func(t *testing.T) {
			assert.InDelta(t, tc.want, combine(times, tc.a), 1e-15)
			got, err := (&world{}).reported(times, tc.a)
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got, 1e-15, "one process: every rank's time is here")
		})
	}
	assert.Zero(t, combine(nil, avgMean))
}

// TestReportedCombinesOverProcesses: under -mpi each process has one rank's time and
// the others come through the world's reduce (here, a second process whose rank took
// 9 us).
func TestReportedCombinesOverProcesses(t *testing.T) {
	const other = 9e-6
	var ops []comm.ReduceOp
	w := &world{size: 2, ids: []int{0}, reduce: func(v []float64, op comm.ReduceOp) error {
		ops = append(ops, op)
		switch op {
		case comm.Sum:
			v[0] += other
		case comm.Min:
			v[0] = min(v[0], other)
		case comm.Max:
			v[0] = max(v[0], other)
		default:
			return fmt.Errorf("unexpected %v", op)
		}
		return nil
	}}
	tests := []struct {
		a    average
		want float64
		op   []comm.ReduceOp
	}{
		{avgRank0, 3e-6, nil}, // rank 0 prints its own time, without a reduction
		{avgMean, 6e-6, []comm.ReduceOp{comm.Sum}},
		{avgMin, 3e-6, []comm.ReduceOp{comm.Min}},
		{avgMax, 9e-6, []comm.ReduceOp{comm.Max}},
	}
	for _, tc := range tests {
		t.Run(tc.a.String(), func(t *testing.T) {
			ops = nil
			got, err := w.reported([]float64{3e-6}, tc.a)
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got, 1e-15)
			assert.Equal(t, tc.op, ops)
		})
	}
}

func TestJSONCarriesTheTimingModes(t *testing.T) {
	tests := []struct {
		args []string
		want jsonConfig
	}{
		{nil, jsonConfig{AggIters: 1, Blocking: 0, Average: "avg", Graphs: 0}},
		{[]string{"-m", "4", "-a", "2", "-G", "3"}, jsonConfig{AggIters: 4, Blocking: 0, Average: "min", Graphs: 3}},
		{[]string{"-z", "1", "-a", "0"}, jsonConfig{AggIters: 1, Blocking: 1, Average: "rank0", Graphs: 0}},
		{[]string{"-z", "3", "-m", "2"}, jsonConfig{AggIters: 2, Blocking: 3, Average: "avg", Graphs: 0}},
		{[]string{"-a", "3"}, jsonConfig{AggIters: 1, Blocking: 0, Average: "max", Graphs: 0}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"-sim", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-json"}, tc.args...)
			out, errOut, code := runCommbench(t, openWorld, args...)
			require.Equal(t, 0, code, errOut)
			var rep report
			require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
			assert.True(t, rep.Simulated)
			assert.Equal(t, simNote, rep.Note)
			got := rep.Config
			assert.Equal(t, tc.want, jsonConfig{AggIters: got.AggIters, Blocking: got.Blocking, Average: got.Average, Graphs: got.Graphs})
			require.Len(t, rep.Collectives, 1)
			assert.Len(t, rep.Collectives[0].Rows, 2)
			for _, r := range rep.Collectives[0].Rows {
				assert.Positive(t, r.InPlace.TimeUS)
			}
		})
	}
}

func TestTimingModesKeepEveryLineMarkedSimulated(t *testing.T) {
	tests := []struct {
		args   []string
		header string
	}{
		{[]string{"-m", "3"}, "agg iters: 3 validation: 1 graph: 0  SIMULATED\n#  SIMULATED\n"}, // defaults of -z, -a: no line
		{[]string{"-z", "1", "-a", "0"}, "graph: 0  SIMULATED\n# blocking: 1 average: 0(rank0)  SIMULATED\n"},
		{[]string{"-G", "2", "-a", "3"}, "graph: 2  SIMULATED\n# blocking: 0 average: 3(max)  SIMULATED\n"},
		{[]string{"-z", "3", "-m", "2"}, "agg iters: 2 validation: 1 graph: 0  SIMULATED\n# blocking: 3 average: 1(avg)  SIMULATED\n"},
		{[]string{"-z", "2"}, "# blocking: 2 average: 1(avg)  SIMULATED\n"},
	}
	for _, tc := range tests {
		args := tc.args
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := runCommbench(t, openWorld, append([]string{"-sim", "2", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-op", "all"}, args...)...)
			require.Equal(t, 0, code, errOut)
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				require.True(t, strings.HasSuffix(l, "  SIMULATED"), "unmarked line %q", l)
			}
			assert.Equal(t, 9, strings.Count(out, "# Out of bounds values : 0 OK  SIMULATED\n"))
			assert.Contains(t, out, tc.header)
		})
	}
}

// hourClock is a clock that jumps an hour at every cross-process barrier, so that a
// time that includes the barriers is above an hour per operation and one that leaves
// them out is not (the operations themselves take far less).
type hourClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *hourClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *hourClock) barrier(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += time.Hour
	return nil
}

// TestBlockingThreeLeavesTheBarriersOutOfTheTime: -z 1 times the barriers after every
// operation, -z 3 (nccl-tests' "reported time excludes barrier") does not.
func TestBlockingThreeLeavesTheBarriersOutOfTheTime(t *testing.T) {
	hour := float64(time.Hour / time.Microsecond)
	tests := []struct {
		z            string
		withBarriers bool
	}{
		{"1", true},
		{"3", false},
	}
	for _, tc := range tests {
		t.Run("-z "+tc.z, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg, err := parseArgs([]string{"-sim", "2", "-b", "64", "-e", "64", "-n", "3", "-w", "0", "-c", "0", "-z", tc.z, "-json"}, io.Discard)
			require.NoError(t, err)
			w, err := openSim(ctx, cfg.sim)
			require.NoError(t, err)
			defer func() { assert.NoError(t, w.close()) }()
			clock := &hourClock{}
			w.now, w.barrier = clock.now, clock.barrier
			rep, err := bench(ctx, cfg, w, io.Discard, newProgress(io.Discard))
			require.NoError(t, err)
			require.Len(t, rep.Collectives, 1)
			require.Len(t, rep.Collectives[0].Rows, 1)
			r := rep.Collectives[0].Rows[0]
			for _, m := range []*measure{r.OutOfPlace, r.InPlace} {
				require.NotNil(t, m)
				if tc.withBarriers {
					assert.GreaterOrEqual(t, m.TimeUS, hour, "3 barriers of an hour over 3 operations")
				} else {
					assert.Less(t, m.TimeUS, hour)
					assert.Positive(t, m.TimeUS)
				}
			}
		})
	}
}
