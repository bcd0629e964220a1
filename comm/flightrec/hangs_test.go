package flightrec

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// hang is a simulated hang: dumps written by recorders driven as a backend drives
// them, and what an analyzer must say of them.
type hang struct {
	name string
	// build writes the dumps into dir.
	build func(t testing.TB, dir string)
	// What the verdict must name.
	problem Problem
	group   string // communicator name
	ranks   []int  // its members
	culprit int
	op      string
	// noDump: the culprit left no dump.
	noDump bool
}

// job is the ranks of a simulated job, one recorder each.
type job struct {
	t     testing.TB
	recs  []*Recorder
	world []*Comm
}

func newJob(t testing.TB, dir string, n int) *job {
	j := &job{t: t}
	ranks := make([]int, n)
	for i := range ranks {
		ranks[i] = i
	}
	for r := range n {
		rec := newRecorder(t, Config{Entries: 64, DumpFile: filepath.Join(dir, "nccl_trace_rank_"), LibVersion: "2.21.5"}, r)
		j.recs = append(j.recs, rec)
		j.world = append(j.world, newComm(t, rec, Group{Name: "0", Desc: "default_pg", ID: 0, Ranks: ranks}))
	}
	return j
}

// steps runs k completed all-reduces of 1024 floats on every rank of the world.
func (j *job) steps(k int) {
	for _, c := range j.world {
		for range k {
			c.Completed(c.Record(Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32}))
		}
	}
}

// dump writes every rank's dump but those in skip.
func (j *job) dump(skip ...int) {
	for r, rec := range j.recs {
		if contains(skip, r) {
			continue
		}
		_, err := rec.WriteFile()
		require.NoError(j.t, err)
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

var hangs = []hang{
	{
		name: "a rank skips a collective", problem: Missing, group: "0", ranks: []int{0, 1, 2, 3}, culprit: 3, op: "all_reduce",
		build: func(t testing.TB, dir string) {
			j := newJob(t, dir, 4)
			j.steps(3)
			for _, c := range j.world[:3] {
				c.Record(Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32})
			}
			j.dump()
		},
	},
	{
		name: "a rank calls with another count", problem: Mismatch, group: "0", ranks: []int{0, 1, 2, 3}, culprit: 2, op: "all_reduce",
		build: func(t testing.TB, dir string) {
			j := newJob(t, dir, 4)
			j.steps(3)
			for r, c := range j.world {
				n := int64(1024)
				if r == 2 {
					n = 512
				}
				c.Record(Call{Op: AllReduce, In: n, Out: n, Type: Float32})
			}
			j.dump()
		},
	},
	{
		name: "a rank dies", problem: NoDump, group: "0", ranks: []int{0, 1, 2, 3}, culprit: 3, op: "all_reduce", noDump: true,
		build: func(t testing.TB, dir string) {
			j := newJob(t, dir, 4)
			j.steps(3)
			for _, c := range j.world[:3] {
				c.Record(Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32})
			}
			j.dump(3)
		},
	},
	{
		name: "a mismatch inside a split communicator", problem: Mismatch, group: "1", ranks: []int{1, 3, 5}, culprit: 5, op: "all_gather",
		build: func(t testing.TB, dir string) {
			j := newJob(t, dir, 6)
			j.steps(2)
			for r, rec := range j.recs {
				// Split by rank parity: two communicators named "1", told apart by their ranks.
				members := []int{0, 2, 4}
				if r%2 == 1 {
					members = []int{1, 3, 5}
				}
				c := newComm(t, rec, Group{Name: "1", Desc: "split", ID: 1, Ranks: members})
				c.Completed(c.Record(Call{Op: AllGather, In: 128, Out: 384, Type: BFloat16}))
				n := int64(128)
				if r == 5 {
					n = 256
				}
				c.Record(Call{Op: AllGather, In: n, Out: 3 * n, Type: BFloat16})
			}
			j.steps(0)
			j.dump()
		},
	},
	{
		name: "a send without its receive", problem: Unmatched, group: "0", ranks: []int{0, 1}, culprit: 1, op: "send",
		build: func(t testing.TB, dir string) {
			j := newJob(t, dir, 2)
			j.steps(3)
			s, r := j.world[0], j.world[1]
			s.Completed(s.Record(Call{Op: Send, Peer: 1, In: 64, Out: 64, Type: Float32}))
			r.Completed(r.Record(Call{Op: Recv, Peer: 0, In: 64, Out: 64, Type: Float32}))
			s.Record(Call{Op: Send, Peer: 1, In: 64, Out: 64, Type: Float32})
			j.dump()
		},
	},
}

func TestAnalyzeNamesTheCulpritOfEachHang(t *testing.T) {
	for _, h := range hangs {
		t.Run(h.name, func(t *testing.T) {
			dir := t.TempDir()
			h.build(t, dir)
			traces, err := ReadDir(dir, "")
			require.NoError(t, err)
			v := verdictOf(t, Analyze(traces), h)
			require.Equal(t, h.problem, v.Problem, "%+v", v)
			require.Equal(t, []int{h.culprit}, v.Culprits, "%+v", v)
			if !h.noDump {
				found := false
				for call := range v.Calls {
					found = found || len(call) >= len(h.op) && call[:len(h.op)] == h.op
				}
				require.True(t, found, "no call of %s in %v", h.op, v.Calls)
			}
		})
	}
}

// verdictOf returns the verdict of h's communicator.
func verdictOf(t testing.TB, vs []Verdict, h hang) Verdict {
	t.Helper()
	for _, v := range vs {
		if v.Group.Name == h.group && fmt.Sprint(v.Group.Ranks) == fmt.Sprint(h.ranks) {
			return v
		}
	}
	t.Fatalf("no verdict for communicator %q %v in %+v", h.group, h.ranks, vs)
	return Verdict{}
}

// Sizes that legitimately differ between ranks are not a mismatch: a gather's output
// (the root receives everything), a scatter's input, an all-to-all's.
func TestAnalyzeAcceptsRootedAndUnevenSizes(t *testing.T) {
	dir := t.TempDir()
	j := newJob(t, dir, 3)
	for r, c := range j.world {
		gatherOut, scatterIn := int64(0), int64(0)
		if r == 0 {
			gatherOut, scatterIn = 30, 30
		}
		c.Completed(c.Record(Call{Op: Gather, In: 10, Out: gatherOut, Type: Float32}))
		c.Completed(c.Record(Call{Op: Scatter, In: scatterIn, Out: 10, Type: Float32}))
		c.Completed(c.Record(Call{Op: AllToAll, In: int64(r + 1), Out: int64(3 - r), Type: Int32}))
	}
	j.dump()
	traces, err := ReadDir(dir, "")
	require.NoError(t, err)
	vs := Analyze(traces)
	require.Len(t, vs, 1)
	require.Empty(t, vs[0].Problem, "%+v", vs[0])

	// Another element type is still a mismatch.
	dir = t.TempDir()
	j = newJob(t, dir, 2)
	for r, c := range j.world {
		typ := Int32
		if r == 1 {
			typ = Int64
		}
		c.Record(Call{Op: AllToAll, In: 4, Out: 4, Type: typ})
	}
	j.dump()
	traces, err = ReadDir(dir, "")
	require.NoError(t, err)
	vs = Analyze(traces)
	require.Equal(t, Mismatch, vs[0].Problem)
}
