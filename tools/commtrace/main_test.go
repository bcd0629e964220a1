package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankOps is what one rank of a synthetic job records on its world communicator.
type rankOps []flightrec.Call

// writeJob writes the dumps of a job whose rank r recorded ops[r] (all completed but
// the last), skipping ranks in dead.
func writeJob(t *testing.T, dir string, ops []rankOps, dead ...int) {
	t.Helper()
	ranks := make([]int, len(ops))
	for i := range ranks {
		ranks[i] = i
	}
	for r, calls := range ops {
		rec, err := flightrec.New(flightrec.Config{Entries: 32, DumpFile: filepath.Join(dir, "fr_")}, r)
		require.NoError(t, err)
		c, err := rec.Comm(flightrec.Group{Name: "0", Desc: "default_pg", Ranks: ranks})
		require.NoError(t, err)
		for i, call := range calls {
			id := c.Record(call)
			if i < len(calls)-1 {
				c.Completed(id)
			}
		}
		require.NoError(t, rec.Close())
		if dead == nil || !contains(dead, r) {
			_, err = rec.WriteFile()
			require.NoError(t, err)
		}
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

func ar(n int64) flightrec.Call {
	return flightrec.Call{Op: flightrec.AllReduce, In: n, Out: n, Type: flightrec.Float32}
}

func TestCommtracePrintsTheVerdict(t *testing.T) {
	bc := flightrec.Call{Op: flightrec.Broadcast, In: 8, Out: 8, Type: flightrec.Int64}
	for _, tc := range []struct {
		name string
		ops  []rankOps
		dead []int
		code int
		want string
	}{
		{"agreeing ranks", []rankOps{{ar(4), ar(4)}, {ar(4), ar(4)}}, nil, 0,
			"communicator \"0\" (default_pg, ranks [0 1]): ranks agree\n"},
		{"a rank calls another collective", []rankOps{{ar(4), ar(4)}, {ar(4), bc}, {ar(4), ar(4)}}, nil, 1,
			"communicator \"0\" (default_pg, ranks [0 1 2]): collective #2: mismatch ranks [1]\n" +
				"  ranks [0 2] called all_reduce in [[4]] out [[4]] Float\n" +
				"  ranks [1] called broadcast in [[8]] out [[8]] Long\n" +
				"  last completed: rank 0 #1 all_reduce; rank 1 #1 all_reduce; rank 2 #1 all_reduce;\n"},
		{"a rank is missing", []rankOps{{ar(4), ar(4)}, {ar(4)}}, nil, 1,
			"communicator \"0\" (default_pg, ranks [0 1]): collective #2: missing ranks [1]\n" +
				"  ranks [0] called all_reduce in [[4]] out [[4]] Float\n" +
				"  rank 1 has nothing pending elsewhere (the cause)\n" +
				"  last completed: rank 0 #1 all_reduce; rank 1 none;\n"},
		{"a rank left no dump", []rankOps{{ar(4), ar(4)}, {ar(4), ar(4)}, {ar(4)}}, []int{2}, 1,
			"communicator \"0\" (default_pg, ranks [0 1 2]): no dump from ranks [2]\n" +
				"  last completed: rank 0 #1 all_reduce; rank 1 #1 all_reduce;\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeJob(t, dir, tc.ops, tc.dead...)
			var out, errb bytes.Buffer
			code := run([]string{dir}, &out, &errb)
			assert.Equal(t, tc.code, code, "stderr: %s", errb.String())
			assert.Equal(t, tc.want, out.String())
		})
	}
}

func TestCommtraceRefusesWhatItCannotRead(t *testing.T) {
	empty := t.TempDir()
	junk := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(junk, "fr_0"), []byte("not a pickle"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no directory", nil, "usage"},
		{"missing directory", []string{filepath.Join(empty, "nope")}, "no such file"},
		{"no dumps", []string{empty}, "no dump in"},
		{"not a dump", []string{junk}, "bad dump"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			assert.Equal(t, 2, run(tc.args, &out, &errb))
			assert.Contains(t, errb.String(), tc.want)
		})
	}
}
