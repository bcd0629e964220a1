package nccl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
)

// TestFlightRecorderDumpsOnFailure records operations through the backend's paths
// (AllReduce's written-out path, enqueue, a group), then fails the communicator: the
// failure writes the dump to the configured path, and it holds every operation in
// order with the sequence numbers, sizes and types the calls had, the waited-for
// all-reduces completed.
func TestFlightRecorderDumpsOnFailure(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "rank_"))
	b, err := newNCCL(context.Background(), stubDriver{}, comm.UniqueID{}, 0, 2,
		newConfig([]Option{bf16, quiet, WithFlightRecorder(16), WithName("job")}))
	require.NoError(t, err)
	require.NotNil(t, b.FlightRecorder())
	require.NoError(t, b.AllReduce(p, 4096))
	require.NoError(t, b.AllReduce(p, 4096))
	require.NoError(t, b.AllGather(p, p+8192, 64))
	require.NoError(t, b.GroupStart())
	require.NoError(t, b.SendTo(p, 8, 1, 3))
	require.NoError(t, b.RecvFrom(p, 8, 1, 3))
	require.NoError(t, b.GroupEnd())

	b.c.fail(errors.New("injected failure"))
	tr, err := flightrec.ReadFile(filepath.Join(dir, "rank_0"))
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, tr.Groups["job"].Ranks)
	var names, states []string
	var coll, p2p []int64
	for _, e := range tr.Entries {
		names = append(names, e.ProfilingName)
		states = append(states, e.State)
		coll, p2p = append(coll, e.CollectiveSeq), append(p2p, e.P2PSeq)
	}
	// The group is one coalesced group: its calls share a p2p sequence number and
	// are followed by the coalesced entry, as PyTorch records a batch of sends and
	// receives.
	assert.Equal(t, []string{"nccl:all_reduce", "nccl:all_reduce", "nccl:all_gather", "nccl:send 0->1", "nccl:recv 0<-1", "nccl:coalesced"}, names)
	assert.Equal(t, []int64{1, 2, 3, 3, 3, 3}, coll)
	assert.Equal(t, []int64{0, 0, 0, 1, 1, 1}, p2p)
	assert.Equal(t, []string{"completed", "completed", "completed"}, states[:3])
	assert.Equal(t, []string{states[5], states[5]}, states[3:5], "the group's calls share its state")
	assert.Equal(t, [][]int64{{2048}}, tr.Entries[0].InputSizes)
	assert.Equal(t, []string{"BFloat16"}, tr.Entries[0].InputTypes)
	assert.Equal(t, [][]int64{{128}}, tr.Entries[2].OutputSizes) // 64 bytes from each of 2 ranks

	_ = b.Close() // a failed communicator: Close dumps again
	_, err = flightrec.ReadFile(filepath.Join(dir, "rank_0"))
	require.NoError(t, err)
}

// TestFlightRecorderDefaults: on by default with flightrec.DefaultEntries; the
// environment's size (PyTorch's variable too), and the option over it, set it; 0 in
// either turns it off.
func TestFlightRecorderDefaults(t *testing.T) {
	for _, n := range flightrec.EnvEntries {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
	size := func(opts ...Option) int {
		b, err := newNCCL(context.Background(), stubDriver{}, comm.UniqueID{}, 0, 2, newConfig(append([]Option{bf16, quiet}, opts...)))
		require.NoError(t, err)
		defer b.Close()
		if b.FlightRecorder() == nil {
			return 0
		}
		return b.FlightRecorder().Config().Entries
	}
	assert.Equal(t, flightrec.DefaultEntries, size())
	assert.Equal(t, flightrec.DefaultEntries, size(WithFlightRecorder(-1)))
	assert.Equal(t, 16, size(WithFlightRecorder(16)))
	assert.Equal(t, 0, size(WithFlightRecorder(0)))
	t.Setenv("TORCH_FR_BUFFER_SIZE", "7")
	assert.Equal(t, 7, size())
	assert.Equal(t, 9, size(WithFlightRecorder(9)))
	t.Setenv("TORCH_FR_BUFFER_SIZE", "0")
	assert.Equal(t, 0, size())
	assert.Equal(t, 5, size(WithFlightRecorder(5)))
	t.Setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0")
	os.Unsetenv("TORCH_FR_BUFFER_SIZE")
	assert.Equal(t, 0, size(), "PyTorch's older variable turns it off")
}

// newStubNCCLRec is newStubNCCL with the flight recorder set to entries (0: off).
func newStubNCCLRec(tb testing.TB, entries int) *Backend {
	tb.Helper()
	b, err := newNCCL(context.Background(), stubDriver{}, comm.UniqueID{}, 0, 2,
		newConfig([]Option{bf16, quiet, WithFlightRecorder(entries)}))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = b.Close() })
	return b
}

// entriesOf reads what b's recorder holds now: each entry's profiling name and
// sequence number (p2p or collective).
func entriesOf(t *testing.T, b *Backend) []string {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, b.FlightRecorder().Dump(&buf))
	tr, err := flightrec.ReadTrace(&buf)
	require.NoError(t, err)
	var out []string
	for _, e := range tr.Entries {
		out = append(out, fmt.Sprintf("%s #%d", e.ProfilingName, e.Seq()))
	}
	return out
}

// A group's calls are recorded per communicator as one coalesced group when the group
// is launched (GroupEnd or a Group's Submit), each communicator with its own sequence
// numbers; a discarded group is not recorded (it never reached NCCL).
func TestFlightRecorderCoalescesGroups(t *testing.T) {
	a, b := newStubNCCLRec(t, 32), newStubNCCLRec(t, 32)

	require.NoError(t, a.GroupStart())
	require.NoError(t, a.SendTo(p, 8, 1, 3))
	require.NoError(t, a.DiscardGroup())
	assert.Empty(t, entriesOf(t, a), "a discarded group was recorded")

	require.NoError(t, a.GroupStart())
	require.NoError(t, a.AllReduce(p, 4096))
	require.NoError(t, b.SendTo(p, 8, 1, 3))
	require.NoError(t, a.AllGather(p, p+8192, 64))
	require.NoError(t, b.RecvFrom(p, 8, 1, 3))
	assert.Empty(t, entriesOf(t, a), "recorded before the launch")
	require.NoError(t, a.GroupEnd())

	g := NewGroup()
	require.NoError(t, g.Add(func() error { return b.SendTo(p, 8, 1, 3) }))
	require.NoError(t, g.Submit())

	assert.Equal(t, []string{"nccl:all_reduce #1", "nccl:all_gather #1", "nccl:coalesced #1"}, entriesOf(t, a))
	assert.Equal(t, []string{"nccl:send 0->1 #1", "nccl:recv 0<-1 #1", "nccl:coalesced #1", "nccl:send 0->1 #2"}, entriesOf(t, b))
}
