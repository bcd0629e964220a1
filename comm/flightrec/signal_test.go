//go:build unix

package flightrec

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDumpOnSignalWritesTheDump(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(t, Config{Entries: 4, DumpFile: filepath.Join(dir, "fr_")}, 5)
	c := newComm(t, r, Group{Name: "0", Ranks: []int{5}})
	c.Record(Call{Op: AllReduce, In: 2, Out: 2, Type: Float64})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.DumpOnSignal(ctx, nil, syscall.SIGUSR2)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR2))
	path := filepath.Join(dir, "fr_5")
	// Wait for the file (the handler runs on its own goroutine); the deadline is
	// generous, the wait ends as soon as it appears.
	deadline := time.Now().Add(time.Minute)
	for {
		if tr, err := ReadFile(path); err == nil {
			require.Equal(t, 5, tr.Rank)
			require.Len(t, tr.Entries, 1)
			return
		}
		require.True(t, time.Now().Before(deadline), "no dump at %s a minute after the signal", path)
		time.Sleep(5 * time.Millisecond)
	}
}
