//go:build cgo

package mpi_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// TestMPIFlightRecorder runs three ranks that all-reduce on the world, split it by
// parity and all-gather in each part, then rank 0 sends to rank 1, which never
// receives; every rank dumps. The dumps name the world and both parts of the split
// (one name, told apart by their world ranks), the operations as "gloo:..." with
// MPI's blocking states, and Analyze names the send without its receive, and nothing
// else.
func TestMPIFlightRecorder(t *testing.T) {
	const env = "NCCLGO_FR_DUMP_FILE"
	if inRank(t) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := mpi.New(ctx, mpi.WithFlightRecorder(16), mpi.WithCloseTimeout(time.Second))
		require.NoError(t, err)
		require.NotNil(t, c.FlightRecorder())
		buf := make([]float32, 8)
		ptr := comm.DevicePtr(uintptr(unsafe.Pointer(&buf[0])))
		require.NoError(t, c.AllReduce(ptr, 4, comm.Float32, comm.Sum))
		part, err := c.Split(ctx, c.Rank()%2, c.Rank())
		require.NoError(t, err)
		require.NoError(t, part.AllGather(ptr, ptr+16, 1, comm.Float32))
		if c.Rank() == 0 {
			require.NoError(t, c.Send(ptr, 2, comm.Float32, 1, 7))
		}
		_, err = c.FlightRecorder().WriteFile()
		require.NoError(t, err)
		require.NoError(t, part.Close())
		_ = c.Close() // rank 0's send is still pending: canceled
		return
	}
	dir := t.TempDir()
	runMPI(t, 3, t.Name(), env+"="+filepath.Join(dir, "rank_"))
	traces, err := flightrec.ReadDir(dir, "")
	require.NoError(t, err)
	require.Len(t, traces, 3)
	for _, tr := range traces {
		require.Equal(t, []int{0, 1, 2}, tr.Groups["mpi:0"].Ranks)
		require.Equal(t, "gloo:all_reduce", tr.Entries[0].ProfilingName)
		require.Equal(t, "completed", tr.Entries[0].State, "the next operation completed it")
	}
	vs := flightrec.Analyze(traces)
	var parts []string
	var problem *flightrec.Verdict
	for i, v := range vs {
		if v.Group.Name == "mpi:0:split1" {
			parts = append(parts, fmt.Sprint(v.Group.Ranks))
			require.Empty(t, v.Problem, "%+v", v)
		}
		if v.Problem != "" {
			problem = &vs[i]
		}
	}
	require.ElementsMatch(t, []string{"[0 2]", "[1]"}, parts)
	require.NotNil(t, problem, "no verdict names the send")
	require.Equal(t, "mpi:0", problem.Group.Name)
	require.Equal(t, flightrec.Unmatched, problem.Problem)
	require.Equal(t, []int{1}, problem.Culprits)
	_ = os.RemoveAll(dir)
}

// TestMPIFlightRecorderSplitWithRanksConfiguredApart: ranks 0 and 2 record, rank 1 does
// not, and every rank makes the same MPI calls on a split's child (an all-gather made
// only where the recorder was on met the others' all-reduce and hung). The children's
// names count every split, those that gave a rank no child too: rank 2, without a
// child in the first split, names the second split's child split2, as rank 0 does.
func TestMPIFlightRecorderSplitWithRanksConfiguredApart(t *testing.T) {
	if !inRank(t) {
		runMPI(t, 3, t.Name())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entries := 0
	if r := os.Getenv("OMPI_COMM_WORLD_RANK"); r == "0" || r == "2" {
		entries = 16
	}
	c, err := mpi.New(ctx, mpi.WithFlightRecorder(entries))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.Equal(t, c.Rank() != 1, c.FlightRecorder() != nil)
	color := 0
	if c.Rank() == 2 {
		color = -1
	}
	first, err := c.Split(ctx, color, c.Rank())
	require.NoError(t, err)
	if first != nil {
		require.NoError(t, first.Close())
	}
	part, err := c.Split(ctx, c.Rank()%2, c.Rank())
	require.NoError(t, err)
	defer func() { require.NoError(t, part.Close()) }()
	sum := []float64{float64(c.Rank() + 1)}
	require.NoError(t, mpi.AllReduce(part.(*mpi.Communicator), sum, comm.Sum))
	require.Equal(t, []float64{float64(4 - 2*(c.Rank()%2))}, sum, "ranks 0 and 2 sum 1+3, rank 1 alone 2")
	if c.Rank() != 1 {
		var buf bytes.Buffer
		require.NoError(t, c.FlightRecorder().Dump(&buf))
		tr, err := flightrec.ReadTrace(&buf)
		require.NoError(t, err)
		require.Equal(t, []int{0, 2}, tr.Groups["mpi:0:split2"].Ranks, "%v", tr.Groups)
	}
}
