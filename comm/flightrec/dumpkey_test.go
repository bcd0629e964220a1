package flightrec

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// keys is a store of keys for DumpOnKey; checked counts the Check calls per key.
type keys struct {
	mu      sync.Mutex
	set     map[string]bool
	checked map[string]int
}

func (k *keys) Check(_ context.Context, names ...string) ([]bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]bool, len(names))
	for i, n := range names {
		out[i] = k.set[n]
		k.checked[n]++
	}
	return out, nil
}

func (k *keys) add(n string) {
	k.mu.Lock()
	k.set[n] = true
	k.mu.Unlock()
}

// checks returns how often n was checked.
func (k *keys) checks(n string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.checked[n]
}

// Each key of the sequence an operator sets writes one dump: after <key>/1 the
// recorder watches <key>/2, and a dump written after it holds what was recorded since.
func TestDumpOnKeyDumpsOncePerKey(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(t, Config{Entries: 4, DumpFile: filepath.Join(dir, "fr_")}, 2)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{2}})
	c.Record(Call{Op: AllReduce, In: 2, Out: 2, Type: Float64})
	s := &keys{set: map[string]bool{}, checked: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.DumpOnKey(ctx, s, "dump", time.Millisecond, nil)
	path := filepath.Join(dir, "fr_2")
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute) // generous: the wait ends as soon as ok
		for !ok() {
			require.True(t, time.Now().Before(deadline), "%s: not within a minute", what)
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("a check of dump/1", func() bool { return s.checks("dump/1") > 0 })
	_, err := os.Stat(path)
	require.True(t, os.IsNotExist(err), "dumped before any key was set")

	s.add("dump/1")
	waitFor("the first dump", func() bool { tr, err := ReadFile(path); return err == nil && len(tr.Entries) == 1 })
	waitFor("a check of dump/2", func() bool { return s.checks("dump/2") > 0 })
	c.Record(Call{Op: AllReduce, In: 2, Out: 2, Type: Float64})
	s.add("dump/2")
	waitFor("the second dump", func() bool { tr, err := ReadFile(path); return err == nil && len(tr.Entries) == 2 })
}
