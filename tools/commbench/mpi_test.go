//go:build cgo

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

const (
	mpiRankEnv = "NCCLGO_COMMBENCH_MPI_RANK"
	mpiArgsEnv = "NCCLGO_COMMBENCH_MPI_ARGS" // more flags for the ranks, space-separated
	mpiOutEnv  = "NCCLGO_COMMBENCH_MPI_OUT"  // the folder each rank writes its output to, as rank<N>
)

// TestMPIModeUnderMpirun runs commbench -mpi as the two ranks of an mpirun job (this
// test binary, re-executed): one device line per rank, the tables once (rank 0), every
// result checked and right, for every collective, a reduced bfloat16 included; also
// with the timing modes that cross processes (-z 1's barrier, -a's reductions, -m's
// groups).
func TestMPIModeUnderMpirun(t *testing.T) {
	if os.Getenv(mpiRankEnv) != "" {
		var out, errOut bytes.Buffer
		args := []string{"-mpi", "-op", "all", "-dtype", "bfloat16", "-redop", "sum",
			"-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-T", "2m"}
		args = append(args, strings.Fields(os.Getenv(mpiArgsEnv))...)
		code := run(context.Background(), args, &out, &errOut, openWorld)
		// A file per rank, not mpirun's forwarded output, where another rank's lines
		// (and Open MPI's) may land inside one of this rank's.
		name := filepath.Join(os.Getenv(mpiOutEnv), "rank"+os.Getenv("OMPI_COMM_WORLD_RANK"))
		require.NoError(t, os.WriteFile(name, out.Bytes(), 0o644))
		require.Zero(t, code, "commbench -mpi exited %d: %s", code, errOut.String())
		return
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		msg := "mpirun is missing: apt-get install openmpi-bin libopenmpi-dev"
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, tc := range []struct{ extra, header string }{
		{"", "agg iters: 1 validation: 1 graph: 0\n"},
		{"-z 1 -a 3", "# blocking: 1 average: 3(max)\n"},
		{"-m 3 -a 2", "agg iters: 3 validation: 1 graph: 0\n# blocking: 0 average: 2(min)\n"},
		{"-a 0", "# blocking: 0 average: 0(rank0)\n"},
		{"-z 3 -m 2", "# blocking: 3 average: 1(avg)\n"},
	} {
		extra := tc.extra
		t.Run(extra, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			dir := t.TempDir()
			cmd := exec.CommandContext(ctx, mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", mpiRankEnv, "-x", mpiArgsEnv,
				"-x", mpiOutEnv, os.Args[0], "-test.run=^TestMPIModeUnderMpirun$", "-test.count=1")
			cmd.Env = append(testenv.Environ(), mpiRankEnv+"=1", mpiArgsEnv+"="+extra, mpiOutEnv+"="+dir)
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b)+testenv.FailureExcerpt(string(b)))
			rank0, err := os.ReadFile(filepath.Join(dir, "rank0"))
			require.NoError(t, err, string(b))
			rank1, err := os.ReadFile(filepath.Join(dir, "rank1"))
			require.NoError(t, err, string(b))
			assert.Empty(t, string(rank1), "rank 1 prints nothing: rank 0 prints the tables")
			out := string(rank0)
			colls := []string{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv"}
			for _, coll := range colls {
				assert.Equal(t, 1, strings.Count(out, "# Collective test starting: "+coll+"\n"), "%s's table is printed once, by rank 0", coll)
			}
			assert.Equal(t, len(colls), strings.Count(out, "# Out of bounds values : 0 OK"))
			assert.Contains(t, out, "Rank  0 Group  0 Pid")
			assert.Contains(t, out, "Rank  1 Group  0 Pid", "rank 1's line, gathered to rank 0")
			assert.NotContains(t, out, "SIMULATED", "MPI on host memory is a real transport")
			assert.Contains(t, out, tc.header)
		})
	}
}
