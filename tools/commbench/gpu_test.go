//go:build gpu

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/raw/cuda"
	"github.com/ncclgo/ncclgo/raw/nccl"
)

// On a GPU machine (make gpu-bundle): every collective through comm's NCCL backend on
// the visible GPUs, every result checked against the host reference.
func TestGPUEveryCollectiveIsRight(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	if _, err := nccl.LoadedVersion(); err != nil {
		t.Skipf("no libnccl: %v", err)
	}
	out, errOut, code := runCommbench(t, openWorld, "-b", "8", "-e", "4M", "-f", "8", "-n", "5", "-op", "all", "-dtype", "all", "-json")
	require.Equal(t, 0, code, errOut)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.False(t, rep.Simulated)
	assert.Zero(t, rep.OutOfBounds)
	require.Len(t, rep.Collectives, len(collectives))
	for _, tbl := range rep.Collectives {
		require.NotEmpty(t, tbl.Rows, tbl.Collective)
		last := tbl.Rows[len(tbl.Rows)-1]
		t.Logf("%s %s %d B: in-place %.2f us, busbw %.2f GB/s", tbl.Collective, last.Type, last.Size, last.InPlace.TimeUS, last.InPlace.BusBW)
	}
}

// On a GPU machine: -G captures each measurement's grouped operations (-m 2) into real
// CUDA graphs (thread-local capture, one per rank) and replays them; the check captures
// and launches one operation, and every result must be right.
func TestGPUGraphReplaysAreRight(t *testing.T) {
	if err := cuda.Init(0); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	if _, err := nccl.LoadedVersion(); err != nil {
		t.Skipf("no libnccl: %v", err)
	}
	out, errOut, code := runCommbench(t, openWorld, "-b", "8", "-e", "1M", "-f", "16", "-n", "4", "-m", "2", "-G", "3", "-op", "all", "-json")
	require.Equal(t, 0, code, errOut)
	var rep report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.False(t, rep.Simulated)
	assert.Equal(t, 3, rep.Config.Graphs)
	assert.Equal(t, 2, rep.Config.AggIters)
	assert.Zero(t, rep.OutOfBounds)
	require.Len(t, rep.Collectives, len(collectives))
	for _, tbl := range rep.Collectives {
		require.NotEmpty(t, tbl.Rows, tbl.Collective)
		last := tbl.Rows[len(tbl.Rows)-1]
		t.Logf("%s %d B, graph: in-place %.2f us, busbw %.2f GB/s", tbl.Collective, last.Size, last.InPlace.TimeUS, last.InPlace.BusBW)
	}
}
