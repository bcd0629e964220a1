package flightrec

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// splitSkipJob writes the dumps of n ranks (2 or 4) recording as comm/mpi records:
// three rounds of an all-reduce on a split "mpi:0:split1" (by parity on 4 ranks, all
// ranks on 2) and one on the world "mpi:0"; the last member of rank 0's part skips its
// third all-reduce on the part, so rank 0 blocks there and never reaches the world's
// third all-reduce, where every other rank waits. It returns the skipper.
func splitSkipJob(t testing.TB, dir string, n int) int {
	world := make([]int, n)
	for i := range world {
		world[i] = i
	}
	part := func(r int) []int {
		if n == 2 {
			return world
		}
		return []int{r % 2, r%2 + 2}
	}
	skipper := part(0)[len(part(0))-1]
	for r := range n {
		rec := newRecorder(t, Config{Entries: 64, DumpFile: filepath.Join(dir, "rank_"), LibVersion: "mpi"}, r)
		w := newComm(t, rec, Group{Name: "mpi:0", Desc: "default_pg", Ranks: world, Backend: "gloo", Blocking: true})
		s := newComm(t, rec, Group{Name: "mpi:0:split1", Desc: "split", ID: 1, Ranks: part(r), Backend: "gloo", Blocking: true})
		call := Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32}
		for i := 1; i <= 3; i++ {
			if i < 3 || r != skipper {
				id := s.Record(call)
				if i == 3 && r == 0 {
					break // blocked: its partner skipped
				}
				s.CompletedLater(id)
			}
			id := w.Record(call)
			if i < 3 {
				w.CompletedLater(id)
			}
		}
		_, err := rec.WriteFile()
		require.NoError(t, err)
	}
	return skipper
}

// The rank that skipped an operation is the cause; rank 0, missing from the world's
// collective because it waits for the skipper in the split, is its victim: Analyze
// puts the cause first, whatever the order of the dumps.
func TestAnalyzeNamesTheCauseBeforeItsVictims(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-ranks", n), func(t *testing.T) {
			dir := t.TempDir()
			skipper := splitSkipJob(t, dir, n)
			traces, err := ReadDir(dir, "")
			require.NoError(t, err)
			for _, order := range [][]*Trace{traces, reversed(traces)} {
				vs := Analyze(order)
				cause := vs[0]
				require.Equal(t, "mpi:0:split1", cause.Group.Name, "%+v", vs)
				require.Equal(t, Missing, cause.Problem)
				require.Equal(t, []int{skipper}, cause.Culprits)
				require.False(t, cause.Victim())
				require.Contains(t, cause.Elsewhere, skipper, "the skipper's pending world all-reduce")
				require.Equal(t, "mpi:0", cause.Elsewhere[skipper].Group.Name)

				victim := vs[1]
				require.Equal(t, "mpi:0", victim.Group.Name, "%+v", vs)
				require.Equal(t, []int{0}, victim.Culprits)
				require.True(t, victim.Victim(), "%+v", victim)
				require.Equal(t, Waiting{Group: cause.Group, Seq: 3, Op: "all_reduce"}, victim.Victims[0])

				var b bytes.Buffer
				require.NoError(t, Report(&b, vs))
				out := b.String()
				t.Log(out)
				first, _, _ := strings.Cut(out, "\n")
				require.Contains(t, first, `"mpi:0:split1"`)
				require.Contains(t, out, fmt.Sprintf("rank %d skipped it", skipper))
				require.Contains(t, out, `rank 0 is blocked in an earlier operation: communicator "mpi:0:split1"`)
			}
		})
	}
}

// Two ranks calling one collective with different counts: nothing says which is
// wrong, so the verdict names no culprit and reports both calls, in either file order.
func TestAnalyzeMismatchOfTwoNamesNoCulprit(t *testing.T) {
	dir := t.TempDir()
	world := []int{0, 1, 2, 3}
	for r := range 4 {
		rec := newRecorder(t, Config{Entries: 16, DumpFile: filepath.Join(dir, "rank_")}, r)
		w := newComm(t, rec, Group{Name: "mpi:0", Ranks: world, Blocking: true})
		s := newComm(t, rec, Group{Name: "mpi:0:split1", Ranks: []int{r % 2, r%2 + 2}, Blocking: true})
		w.CompletedLater(w.Record(Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32}))
		n := int64(1024)
		if r == 2 {
			n = 512
		}
		s.Record(Call{Op: AllReduce, In: n, Out: n, Type: Float32})
		_, err := rec.WriteFile()
		require.NoError(t, err)
	}
	traces, err := ReadDir(dir, "")
	require.NoError(t, err)
	for _, order := range [][]*Trace{traces, reversed(traces)} {
		vs := Analyze(order)
		v := vs[0]
		require.Equal(t, Mismatch, v.Problem, "%+v", vs)
		require.Equal(t, []int{0, 2}, v.Group.Ranks)
		require.Empty(t, v.Culprits, "two ranks, two calls: no culprit")
		require.Len(t, v.Calls, 2)
		var b bytes.Buffer
		require.NoError(t, Report(&b, vs))
		require.Contains(t, b.String(), "mismatch, no culprit")
		require.Contains(t, b.String(), "ranks [0] called all_reduce in [[1024]]")
		require.Contains(t, b.String(), "ranks [2] called all_reduce in [[512]]")
	}
}

func reversed(ts []*Trace) []*Trace {
	out := slices.Clone(ts)
	slices.Reverse(out)
	return out
}

// What torch 2.14's fr_trace says of the same hang, for the documentation: both
// communicators' missing ranks, in the order of its records, with no word of which
// is the cause (commtrace's verdicts, logged next to it, put the cause first).
func TestTorchAnalyzerOnACauseAndItsVictim(t *testing.T) {
	root := sidRoot(t)
	dir := tmpDir(t)
	splitSkipJob(t, dir, 4)
	out, err := frTrace(t, root, dir)
	require.NoError(t, err, "fr_trace failed:\n%s%s", out, testenv.FailureExcerpt(out))
	traces, err := ReadDir(dir, "")
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, Report(&b, Analyze(traces)))
	t.Logf("fr_trace:\n%s\ncommtrace:\n%s", out, b.String())
	require.Contains(t, out, "missing ranks: {0}", "fr_trace names rank 0 missing from the world")
	require.Contains(t, out, "missing ranks: {2}", "fr_trace names rank 2 missing from the split")
	require.NotContains(t, strings.ToLower(out), "victim")
}
