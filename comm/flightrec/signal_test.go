//go:build unix

package flightrec

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
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

// signalChildEnv names the dump prefix of TestDumpOnSignalPassesSIGTERMOn's child.
const signalChildEnv = "NCCLGO_FR_SIGNAL_CHILD"

// SIGTERM (what mpirun sends its ranks when it aborts a job) is dumped on, then does
// what it does without DumpOnSignal: the process ends by the signal, at once. A child
// process (this test binary) records, waits for signals, and is sent SIGUSR2 (a dump,
// and it lives on) and then SIGTERM.
func TestDumpOnSignalPassesSIGTERMOn(t *testing.T) {
	if prefix := os.Getenv(signalChildEnv); prefix != "" {
		r := newRecorder(t, Config{Entries: 4, DumpFile: prefix}, 3)
		c := newComm(t, r, Group{Name: "0", Ranks: []int{3}})
		c.Record(Call{Op: Broadcast, In: 8, Out: 8, Type: Int64})
		r.DumpOnSignal(context.Background(), nil, syscall.SIGUSR2, syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(10 * time.Minute) // until the signal ends the process
		t.Fatal("alive 10 minutes after it was ready")
	}
	dir := t.TempDir()
	prefix := filepath.Join(dir, "fr_")
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), signalChildEnv+"="+prefix)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	// The child's stderr goes to a file, read only to explain a failure.
	errFile, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer errFile.Close()
	cmd.Stderr = errFile
	stderr := func() string { b, _ := os.ReadFile(errFile.Name()); return string(b) }
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the child printed no ready line: %s", stderr())
	require.Equal(t, "ready\n", line)
	go func() { _, _ = io.Copy(io.Discard, stdout); done <- cmd.Wait() }()

	// SIGUSR2: a dump, and the child lives on.
	path := prefix + "3"
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR2))
	waitForDump(t, path, 1)
	require.NoError(t, os.Remove(path))
	select {
	case err := <-done:
		t.Fatalf("the child ended on SIGUSR2: %v\n%s", err, stderr())
	default:
	}

	// SIGTERM: a dump, and the child ends by the signal.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a hang guard: it ends within milliseconds
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the child still ran a minute after SIGTERM: the signal was swallowed\n%s", stderr())
	}
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child exited cleanly after SIGTERM")
	ws := exit.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled(), "the child exited with status %d, not by the signal\n%s", ws.ExitStatus(), stderr())
	require.Equal(t, syscall.SIGTERM, ws.Signal())
	waitForDump(t, path, 1)
}

// waitForDump waits for a readable dump at path with n entries.
func waitForDump(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // generous: it appears within milliseconds
	for {
		if tr, err := ReadFile(path); err == nil {
			require.Len(t, tr.Entries, n)
			return
		}
		require.True(t, time.Now().Before(deadline), "no dump at %s a minute after the signal", path)
		time.Sleep(5 * time.Millisecond)
	}
}
