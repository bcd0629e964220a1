package comm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Environment of a rank process started by TestProcessesRendezvous... (besides
// torchrun's variables, which the child reads through Connect's JoinJob).
const (
	procChildEnv    = "NCCLGO_COMM_TEST_CHILD"    // "1": run childMain instead of the tests
	procHangEnv     = "NCCLGO_COMM_TEST_HANG"     // "1": join the job, then wait to be killed
	procDeadlineEnv = "NCCLGO_COMM_TEST_DEADLINE" // deadline of the first bring-up attempt
)

func TestMain(m *testing.M) {
	if os.Getenv(procChildEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain is one rank process: it joins the job described by its environment and
// brings up its backend through the store (rank 0 serves it), NCCL being the fake
// driver: real NCCL needs a GPU to initialise. It reports on stdout, one line per
// event: "joined", "fail elapsed_ms=N missing=[...] err=...", "ok gen=G uid=<hex>". A
// failed attempt is retried (the next generation), up to three times.
func childMain() int {
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	first, err := time.ParseDuration(os.Getenv(procDeadlineEnv))
	if err != nil {
		say("error deadline: %v", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := newIDFake()
	j, err := JoinJob(ctx, withDevice(f), WithLogger(log))
	if err != nil {
		say("error join: %v", err)
		return 2
	}
	defer j.Close()
	say("joined")
	if os.Getenv(procHangEnv) == "1" {
		<-ctx.Done() // killed long before
		return 3
	}
	deadline := first
	for range 3 {
		actx, acancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		b, err := j.NewNCCL(actx)
		acancel()
		if err != nil {
			var be *rendezvous.BarrierError
			missing := "none"
			if errors.As(err, &be) {
				missing = fmt.Sprint(be.Missing)
			}
			say("fail elapsed_ms=%d missing=%s err=%v", time.Since(start).Milliseconds(), missing, err)
			deadline = 20 * time.Second
			continue
		}
		ids := f.initIDs()
		say("ok gen=%d uid=%s", b.c.cfg.job.member.generation(), hex.EncodeToString(ids[len(ids)-1][:]))
		// Rank 0 serves the store until every rank has its id.
		if err := j.Store().Barrier(ctx, "test/done", j.Rank(), j.WorldSize()); err != nil {
			say("error final barrier: %v", err)
			return 1
		}
		if err := b.Close(); err != nil {
			say("error close: %v", err)
			return 1
		}
		return 0
	}
	return 1
}

// rankProc is a running rank process.
type rankProc struct {
	rank   int
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{} // closed once the process is reaped
	err    error         // its exit status, valid after exited
}

type procLine struct {
	rank int
	text string
}

// The test binary starts itself as the ranks of a job on loopback. Rank 2 joins the job
// and is killed before its bring-up: the others fail within their deadline naming rank
// 2. A restarted rank 2 joins them in the next generation, where every rank gets rank
// 0's unique id.
func TestProcessesRendezvousSurviveAKilledRank(t *testing.T) {
	const world, victim = 4, 2
	const firstDeadline = 2 * time.Second
	exe, err := os.Executable()
	require.NoError(t, err)
	port := freePort(t)
	token := hex.EncodeToString([]byte(t.Name()))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := make(chan procLine, 64)
	var mu sync.Mutex
	var procs []*rankProc
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			<-p.exited
			if t.Failed() {
				t.Logf("rank %d stderr:\n%s", p.rank, p.stderr.String())
			}
		}
	})
	start := func(rank int, hang bool) *rankProc {
		p := &rankProc{rank: rank, exited: make(chan struct{})}
		p.cmd = exec.CommandContext(ctx, exe, "-test.run=^$")
		p.cmd.Env = append(os.Environ(),
			procChildEnv+"=1",
			rendezvous.EnvMasterAddr+"=127.0.0.1",
			rendezvous.EnvMasterPort+"="+strconv.Itoa(port),
			rendezvous.EnvRank+"="+strconv.Itoa(rank),
			rendezvous.EnvWorldSize+"="+strconv.Itoa(world),
			rendezvous.EnvLocalRank+"="+strconv.Itoa(rank),
			rendezvous.EnvToken+"="+token,
			procDeadlineEnv+"="+firstDeadline.String(),
			procHangEnv+"="+map[bool]string{true: "1", false: "0"}[hang],
		)
		p.cmd.Stderr = &p.stderr
		out, err := p.cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, p.cmd.Start())
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- procLine{rank, sc.Text()}
			}
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		mu.Lock()
		procs = append(procs, p)
		mu.Unlock()
		return p
	}
	next := func(what string, match func(procLine) bool) procLine {
		t.Helper()
		for {
			select {
			case ln := <-lines:
				require.False(t, strings.HasPrefix(ln.text, "error"), "rank %d: %s", ln.rank, ln.text)
				if match(ln) {
					return ln
				}
				t.Logf("rank %d: %s", ln.rank, ln.text)
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	ranks := map[int]*rankProc{}
	for r := range world {
		ranks[r] = start(r, r == victim)
	}
	joined := map[int]bool{}
	for len(joined) < world {
		joined[next("every rank to join", func(ln procLine) bool { return ln.text == "joined" }).rank] = true
	}
	require.NoError(t, ranks[victim].cmd.Process.Kill())
	<-ranks[victim].exited

	for range world - 1 {
		ln := next("the others to fail", func(ln procLine) bool { return strings.HasPrefix(ln.text, "fail ") })
		t.Logf("rank %d: %s", ln.rank, ln.text)
		assert.Contains(t, ln.text, "missing=[2]")
		assert.Contains(t, ln.text, "generation 0")
		assert.Contains(t, ln.text, "1 of 4 ranks missing: [2]")
		var elapsed int
		_, err := fmt.Sscanf(ln.text, "fail elapsed_ms=%d", &elapsed)
		require.NoError(t, err)
		assert.Less(t, time.Duration(elapsed)*time.Millisecond, firstDeadline+time.Second, "rank %d failed within its deadline", ln.rank)
	}

	ranks[victim] = start(victim, false)
	uids := map[int]string{}
	for len(uids) < world {
		ln := next("generation 1", func(ln procLine) bool { return strings.HasPrefix(ln.text, "ok ") })
		assert.True(t, strings.HasPrefix(ln.text, "ok gen=1 uid="), "rank %d: %s", ln.rank, ln.text)
		uids[ln.rank] = ln.text[strings.LastIndex(ln.text, "=")+1:]
	}
	for r := range world {
		assert.Len(t, uids[r], 256, "rank %d got 128 bytes", r)
		assert.Equal(t, uids[0], uids[r], "rank %d got rank 0's id", r)
		select {
		case <-ranks[r].exited:
			assert.NoError(t, ranks[r].err, "rank %d exit", r)
		case <-ctx.Done():
			t.Fatalf("rank %d did not exit", r)
		}
	}
}
