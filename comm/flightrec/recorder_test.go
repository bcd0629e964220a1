package flightrec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRecorder(t testing.TB, cfg Config, rank int) *Recorder {
	t.Helper()
	r, err := New(cfg, rank)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func newComm(t testing.TB, r *Recorder, g Group) *Comm {
	t.Helper()
	c, err := r.Comm(g)
	require.NoError(t, err)
	return c
}

func roundTrip(t testing.TB, r *Recorder) *Trace {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, r.Dump(&buf))
	tr, err := ReadTrace(&buf)
	require.NoError(t, err)
	return tr
}

func TestDumpRoundTripsWhatWasRecorded(t *testing.T) {
	r := newRecorder(t, Config{Entries: 16, LibVersion: "2.21.5"}, 1)
	world := newComm(t, r, Group{Name: "0", Desc: "default_pg", ID: 0, Ranks: []int{0, 1}})
	half := newComm(t, r, Group{Name: "1", ID: 1, Ranks: []int{1, 3}, Backend: "gloo"})

	a := world.Record(Call{Op: AllReduce, In: 1024, Out: 1024, Type: Float32})
	world.Started(a)
	world.Completed(a)
	half.Record(Call{Op: AllGather, In: 4, Out: 8, Type: BFloat16})
	g := world.RecordGroup([]Call{{Op: Send, Peer: 0, In: 7, Out: 7, Type: Int64}, {Op: Recv, Peer: 0, In: 7, Out: 7, Type: Int64}})
	world.Started(g)
	world.Record(Call{Op: Barrier})

	tr := roundTrip(t, r)
	assert.Equal(t, Version, tr.Version)
	assert.Equal(t, "2.21.5", tr.CommLibVersion)
	assert.Equal(t, map[string]GroupConfig{
		"0": {Name: "0", Desc: "default_pg", Ranks: []int{0, 1}},
		"1": {Name: "1", Desc: "undefined", Ranks: []int{1, 3}},
	}, tr.Groups)
	require.Len(t, tr.Entries, 6)
	type row struct {
		rec, coll, p2p, op int64
		name, group, state string
		p2pFlag            bool
	}
	var got []row
	for _, e := range tr.Entries {
		got = append(got, row{e.RecordID, e.CollectiveSeq, e.P2PSeq, e.OpID, e.ProfilingName, e.Group, e.State, e.IsP2P})
	}
	assert.Equal(t, []row{
		{0, 1, 0, 1, "nccl:all_reduce", "0", "completed", false},
		{1, 1, 0, 1, "gloo:all_gather", "1", "scheduled", false},
		{2, 1, 1, 2, "nccl:send 1->0", "0", "started", true},
		{3, 1, 1, 3, "nccl:recv 1<-0", "0", "started", true},
		{4, 1, 1, 3, "nccl:coalesced", "0", "started", true},
		{5, 2, 1, 4, "nccl:barrier", "0", "scheduled", false},
	}, got)
	e := tr.Entries[0]
	assert.Equal(t, [][]int64{{1024}}, e.InputSizes)
	assert.Equal(t, []string{"Float"}, e.OutputTypes)
	assert.True(t, e.Retired)
	assert.NotZero(t, e.Started)
	assert.GreaterOrEqual(t, e.Completed, e.Started)
	assert.GreaterOrEqual(t, e.Started, e.Created)
	assert.Equal(t, [][]int64{{8}}, tr.Entries[1].OutputSizes)
	assert.Zero(t, tr.Entries[1].Started)
	assert.Empty(t, tr.Entries[5].InputSizes)
	assert.Equal(t, "all_gather", tr.Entries[1].Op())
	assert.Equal(t, "send", tr.Entries[2].Op())
}

func TestRingKeepsTheLastEntries(t *testing.T) {
	r := newRecorder(t, Config{Entries: 4}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0}})
	var ids []ID
	for i := range 10 {
		ids = append(ids, c.Record(Call{Op: AllReduce, In: int64(i), Out: int64(i), Type: Float32}))
	}
	c.Completed(ids[2]) // left the ring: ignored
	c.CompletedThrough(ids[7])
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries, 4)
	for i, e := range tr.Entries {
		assert.EqualValues(t, 7+i, e.CollectiveSeq)
		assert.Equal(t, [][]int64{{int64(6 + i)}}, e.InputSizes)
		want := "scheduled"
		if i < 2 {
			want = "completed"
		}
		assert.Equal(t, want, e.State, "seq %d", e.CollectiveSeq)
	}
}

func TestOffRecorderDoesNothing(t *testing.T) {
	r, err := New(Config{}, 0)
	require.NoError(t, err)
	require.Nil(t, r)
	c, err := r.Comm(Group{Name: "0", Ranks: []int{0}})
	require.NoError(t, err)
	require.Nil(t, c)
	assert.Zero(t, c.Record(Call{Op: AllReduce}))
	c.Started(1)
	c.Completed(1)
	c.CompletedThrough(1)
	assert.ErrorIs(t, r.Dump(&bytes.Buffer{}), ErrOff)
	_, err = r.WriteFile()
	assert.ErrorIs(t, err, ErrOff)
	assert.NoError(t, r.Close())
}

func TestBadConfigIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		rank int
		g    Group
	}{
		{"negative entries", Config{Entries: -1}, 0, Group{}},
		{"negative rank", Config{Entries: 1}, -1, Group{}},
		{"no name", Config{Entries: 1}, 0, Group{Ranks: []int{0}}},
		{"rank not a member", Config{Entries: 1}, 2, Group{Name: "x", Ranks: []int{0, 1}}},
		{"negative member", Config{Entries: 1}, 0, Group{Name: "x", Ranks: []int{0, -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, tc.rank)
			if err == nil {
				defer r.Close()
				_, err = r.Comm(tc.g)
			}
			assert.ErrorIs(t, err, ErrConfig)
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Config
		bad  bool
	}{
		{"nothing set keeps the default", nil, Config{Entries: DefaultEntries}, false},
		{"torch's size", map[string]string{"TORCH_FR_BUFFER_SIZE": "100"}, Config{Entries: 100}, false},
		{"ncclgo's size wins", map[string]string{"NCCLGO_FR_BUFFER_SIZE": "0", "TORCH_FR_BUFFER_SIZE": "100"}, Config{}, false},
		{"deprecated torch size", map[string]string{"TORCH_NCCL_TRACE_BUFFER_SIZE": "7"}, Config{Entries: 7}, false},
		{"torch's dump file", map[string]string{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/fr_"}, Config{Entries: DefaultEntries, DumpFile: "/x/fr_"}, false},
		{"newer torch dump file wins", map[string]string{"TORCH_FR_DUMP_TEMP_FILE": "/y/a_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/fr_"}, Config{Entries: DefaultEntries, DumpFile: "/y/a_"}, false},
		{"call sites", map[string]string{"NCCLGO_FR_CALL_SITES": "1"}, Config{Entries: DefaultEntries, CallSites: true}, false},
		{"bad size", map[string]string{"TORCH_FR_BUFFER_SIZE": "lots"}, Config{}, true},
		{"negative size", map[string]string{"NCCLGO_FR_BUFFER_SIZE": "-3"}, Config{}, true},
		{"bad call sites", map[string]string{"NCCLGO_FR_CALL_SITES": "maybe"}, Config{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, l := range [][]string{EnvEntries, EnvDumpFile, EnvCallSites} {
				for _, n := range l {
					if v, ok := tc.env[n]; ok {
						t.Setenv(n, v)
					} else {
						t.Setenv(n, "")
						os.Unsetenv(n)
					}
				}
			}
			got, err := ConfigFromEnv(Config{Entries: DefaultEntries})
			if tc.bad {
				assert.ErrorIs(t, err, ErrConfig)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestWriteFileNamesTheRank(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sub")
	r := newRecorder(t, Config{Entries: 8, DumpFile: filepath.Join(dir, "fr_")}, 3)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{2, 3}})
	c.Record(Call{Op: Broadcast, In: 1, Out: 1, Type: Uint8})
	path, err := r.WriteFile()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "fr_3"), path)
	trs, err := ReadDir(dir, "")
	require.NoError(t, err)
	require.Len(t, trs, 1)
	assert.Equal(t, 3, trs[0].Rank)
	assert.Equal(t, "nccl:broadcast", trs[0].Entries[0].ProfilingName)
}

func TestCallSiteNamesTheCaller(t *testing.T) {
	r := newRecorder(t, Config{Entries: 8, CallSites: true}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0}})
	backendAllReduce(c) // the line below the call site recorded
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries[0].Frames, 1)
	f := tr.Entries[0].Frames[0]
	assert.Contains(t, f.Name, "TestCallSiteNamesTheCaller")
	assert.Equal(t, "recorder_test.go", filepath.Base(f.File))
}

// backendAllReduce stands for a backend's exported method calling Record.
//
//go:noinline
func backendAllReduce(c *Comm) { c.Record(Call{Op: AllReduce, In: 1, Out: 1, Type: Float32}) }

func TestConcurrentRecordsKeepSequenceNumbersDistinct(t *testing.T) {
	r := newRecorder(t, Config{Entries: 4096}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0}})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				id := c.Record(Call{Op: AllReduce, In: 1, Out: 1, Type: Float32})
				c.Completed(id)
				var buf bytes.Buffer
				if id%50 == 0 {
					_ = r.Dump(&buf)
				}
			}
		})
	}
	wg.Wait()
	tr := roundTrip(t, r)
	require.Len(t, tr.Entries, 1600)
	seen := map[int64]bool{}
	for _, e := range tr.Entries {
		assert.False(t, seen[e.CollectiveSeq])
		seen[e.CollectiveSeq] = true
		assert.Equal(t, "completed", e.State)
	}
}

func TestReadTraceReadsTorchGlooDump(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "torch214-gloo-rank0.pickle"))
	require.NoError(t, err)
	defer f.Close()
	tr, err := ReadTrace(f)
	require.NoError(t, err)
	assert.Equal(t, "2.10", tr.Version)
	require.Len(t, tr.Entries, 4)
	e := tr.Entries[0]
	assert.Equal(t, "gloo:all_reduce", e.ProfilingName)
	assert.Equal(t, "0", e.Group)
	assert.Equal(t, "default_pg", e.Desc)
	assert.Equal(t, [][]int64{{4}}, e.InputSizes)
	assert.Greater(t, e.Created, int64(1<<60))
	assert.Equal(t, "gloo:barrier", tr.Entries[3].ProfilingName)
	assert.Equal(t, []int{0, 1}, tr.Groups[""].Ranks)
	require.NotEmpty(t, e.Frames)
	assert.Equal(t, "all_reduce", e.Frames[0].Name)
}

func TestReadTraceRefusesBadInput(t *testing.T) {
	good := func() []byte {
		r := newRecorder(t, Config{Entries: 4}, 0)
		c := newComm(t, r, Group{Name: "0", Ranks: []int{0}})
		c.Record(Call{Op: AllReduce, In: 1, Out: 1, Type: Float32})
		var buf bytes.Buffer
		require.NoError(t, r.Dump(&buf))
		return buf.Bytes()
	}()
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)/2]},
		{"no stop", good[:len(good)-1]},
		{"not a dict", []byte{opProto, 2, opNone, opStop}},
		{"unsupported opcode", []byte{opProto, 2, 'c', 'o', 's', '\n', opStop}},
		{"huge string length", []byte{opProto, 2, opBinUnicode, 0xff, 0xff, 0xff, 0x7f, opStop}},
		{"list keyed dict", []byte{opEmptyDict, opEmptyList, opNone, opSetItem, opStop}},
		{"unset memo", []byte{opBinGet, 9, opStop}},
		{"setitems without mark", []byte{opEmptyDict, opSetItems, opStop}},
		{"self-containing list", []byte{opEmptyList, opBinPut, 0, opBinGet, 0, opAppend, opStop}},
		{"shared list bomb", bomb()},
		{"dict without entries", []byte{opEmptyDict, opMark, opBinUnicode, 7, 0, 0, 0, 'v', 'e', 'r', 's', 'i', 'o', 'n', opBinUnicode, 1, 0, 0, 0, '2', opSetItems, opStop}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(bytes.NewReader(tc.data))
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrFormat), "%v", err)
			if tc.name == "shared list bomb" {
				assert.Contains(t, err.Error(), "shares more values")
			}
		})
	}
}

// bomb is a pickle of 40 levels of a list holding the level below twice: 2^40 values
// from under 400 bytes.
func bomb() []byte {
	b := []byte{opEmptyList}
	for range 40 {
		b = append(b, opBinPut, 0, opEmptyList, opMark, opBinGet, 0, opBinGet, 0, opAppends)
	}
	return append(b, opStop)
}

func TestBlockingCommunicatorCompletesThePreviousOperation(t *testing.T) {
	r := newRecorder(t, Config{Entries: 8}, 0)
	c := newComm(t, r, Group{Name: "mpi", Ranks: []int{0, 1}, Blocking: true})
	c.Record(Call{Op: AllReduce, In: 8, Out: 8, Type: Float64})
	c.Record(Call{Op: Send, Peer: 1, In: 8, Out: 8, Type: Float64})
	c.Record(Call{Op: Barrier})
	tr := roundTrip(t, r)
	var states []string
	for _, e := range tr.Entries {
		states = append(states, e.State)
	}
	assert.Equal(t, []string{"completed", "completed", "started"}, states)
	assert.NotZero(t, tr.Entries[2].Started)
}

// An operation CompletedLater marks completed carries the time of the mark, not the
// time of the dump (or of the next record) that applies it.
func TestCompletedLaterKeepsTheTimeOfTheCompletion(t *testing.T) {
	r := newRecorder(t, Config{Entries: 4, Resolution: time.Millisecond}, 0)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{0}, Blocking: true})
	id := c.Record(Call{Op: AllReduce, In: 4, Out: 4, Type: Float32})
	c.CompletedLater(id)
	marked := time.Now()
	time.Sleep(200 * time.Millisecond)
	c.Record(Call{Op: AllReduce, In: 4, Out: 4, Type: Float32})
	time.Sleep(200 * time.Millisecond)
	tr := roundTrip(t, r)
	require.Equal(t, "completed", tr.Entries[0].State)
	done := time.Unix(0, tr.Entries[0].Completed)
	// The clock the recorder reads lags the system's by at most a few periods; the
	// next record came 200 ms later, the dump 400 ms.
	require.Less(t, done.Sub(marked), 100*time.Millisecond, "completed at %v, marked at %v", done, marked)
}
