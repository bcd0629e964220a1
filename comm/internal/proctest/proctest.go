// Package proctest runs copies of the current test binary as the ranks of a job on
// loopback and reads what each reports on stdout, one line per event. The tests of comm
// and comm/rendezvous use it to check behaviour across real processes (a rank killed
// during the rendezvous, a replacement joining the next generation).
//
// The child side is the test binary's own TestMain: it recognises the environment the
// parent sets and runs a child body instead of the tests.
package proctest

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/ncclgo/ncclgo/internal/testenv"
)

// Line is one line a rank process printed on stdout.
type Line struct {
	Rank int
	Text string
}

// Proc is a running rank process.
type Proc struct {
	Rank   int
	Cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{} // closed once the process is reaped
	err    error         // its exit status, valid after exited
}

// Exited is closed once the process has been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit status; valid once Exited is closed.
func (p *Proc) Err() error { return p.err }

// Job is the rank processes of one test, sharing one stream of lines.
type Job struct {
	t     testing.TB
	ctx   context.Context
	exe   string
	lines chan Line
	mu    sync.Mutex
	procs []*Proc
}

// New returns a Job whose processes end with ctx. When the test ends every process is
// killed and reaped, and, if the test failed, each one's stderr is logged.
func New(t testing.TB, ctx context.Context) *Job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("test binary: %v", err)
	}
	j := &Job{t: t, ctx: ctx, exe: exe, lines: make(chan Line, 64)}
	t.Cleanup(func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, p := range j.procs {
			_ = p.Cmd.Process.Kill()
			<-p.exited
			if t.Failed() {
				t.Logf("rank %d stderr:\n%s", p.Rank, p.stderr.String())
			}
		}
	})
	return j
}

// Start runs the test binary, with no test selected, as rank, its environment being
// this process's plus env.
func (j *Job) Start(rank int, env ...string) *Proc {
	j.t.Helper()
	p := &Proc{Rank: rank, exited: make(chan struct{})}
	p.Cmd = exec.CommandContext(j.ctx, j.exe, "-test.run=^$")
	p.Cmd.Env = append(testenv.Environ(), env...)
	p.Cmd.Stderr = &p.stderr
	out, err := p.Cmd.StdoutPipe()
	if err != nil {
		j.t.Fatalf("rank %d stdout: %v", rank, err)
	}
	if err := p.Cmd.Start(); err != nil {
		j.t.Fatalf("start rank %d: %v", rank, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			j.lines <- Line{rank, sc.Text()}
		}
		p.err = p.Cmd.Wait()
		close(p.exited)
	}()
	j.mu.Lock()
	j.procs = append(j.procs, p)
	j.mu.Unlock()
	return p
}

// Next returns the next line that match accepts and logs the lines it skips. A line
// starting with "error" fails the test, and so does the Job's context ending first
// (what says what was awaited).
func (j *Job) Next(what string, match func(Line) bool) Line {
	j.t.Helper()
	for {
		select {
		case ln := <-j.lines:
			if strings.HasPrefix(ln.Text, "error") {
				j.t.Fatalf("rank %d: %s", ln.Rank, ln.Text)
			}
			if match(ln) {
				return ln
			}
			j.t.Logf("rank %d: %s", ln.Rank, ln.Text)
		case <-j.ctx.Done():
			j.t.Fatalf("timed out waiting for %s", what)
		}
	}
}
