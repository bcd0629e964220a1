package rendezvous

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Environment of a child process started by TestMultiProcessRendezvous.
const (
	childEnv         = "NCCLGO_RDZV_TEST_CHILD"
	childGenEnv      = "NCCLGO_RDZV_TEST_GEN"      // first generation to try
	childHangEnv     = "NCCLGO_RDZV_TEST_HANG"     // "1": connect, then block until killed
	childDeadlineEnv = "NCCLGO_RDZV_TEST_DEADLINE" // deadline of the first generation
)

const (
	childGroup         = "mp"
	childRetryDeadline = 15 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain is one rank: rank 0 embeds the server; every rank dials it, rank 0 publishes
// a random 128-byte id under the generation's key, all ranks meet in a barrier, and the
// others read the id. A failed generation is reported and the next one tried.
func childMain() int {
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	cfg, err := FromEnv()
	if err != nil {
		say("error config: %v", err)
		return 2
	}
	gen, _ := strconv.ParseUint(os.Getenv(childGenEnv), 10, 64)
	deadline, err := time.ParseDuration(os.Getenv(childDeadlineEnv))
	if err != nil {
		say("error deadline: %v", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cfg.Rank == 0 {
		l, err := net.Listen("tcp", cfg.Addr())
		if err != nil {
			say("error listen: %v", err)
			return 2
		}
		srv := NewServer(WithToken(cfg.Token), WithLogger(log))
		go func() { _ = srv.Serve(ctx, l) }()
		defer srv.Close()
	}
	c, err := Dial(ctx, cfg.Addr(), WithToken(cfg.Token), WithLogger(log))
	if err != nil {
		say("error dial: %v", err)
		return 2
	}
	defer c.Close()
	say("connected")
	if os.Getenv(childHangEnv) == "1" {
		<-ctx.Done() // killed long before
		return 3
	}
	for range 3 {
		gctx, gcancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		uid, err := exchangeID(gctx, c, cfg, gen)
		gcancel()
		if err != nil {
			var be *BarrierError
			missing := "none"
			if errors.As(err, &be) {
				missing = fmt.Sprint(be.Missing)
			}
			say("fail gen=%d elapsed_ms=%d missing=%s err=%v", gen, time.Since(start).Milliseconds(), missing, err)
			gen++
			deadline = childRetryDeadline
			continue
		}
		say("ok gen=%d uid=%x", gen, uid)
		// Rank 0 serves until everyone has read the id.
		if err := c.Barrier(ctx, GenerationKey(childGroup, gen, "done"), cfg.Rank, cfg.WorldSize); err != nil {
			say("error final barrier: %v", err)
			return 1
		}
		return 0
	}
	return 1
}

func exchangeID(ctx context.Context, c *Client, cfg Config, gen uint64) ([]byte, error) {
	key := GenerationKey(childGroup, gen, "uid")
	if cfg.Rank == 0 {
		uid := make([]byte, 128)
		_, _ = rand.Read(uid)
		if err := c.Set(ctx, key, uid); err != nil {
			return nil, err
		}
	}
	if err := c.Barrier(ctx, GenerationKey(childGroup, gen, "barrier"), cfg.Rank, cfg.WorldSize); err != nil {
		return nil, err
	}
	return c.Get(ctx, key)
}

// child is a running rank process.
type child struct {
	rank   int
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan struct{} // closed once the process is reaped
	err    error         // its exit status, valid after exited
}

type childLine struct {
	rank int
	text string
}

func TestMultiProcessRendezvousSurvivesAKilledRank(t *testing.T) {
	const world, victim = 4, 2
	const firstDeadline = 2 * time.Second
	exe, err := os.Executable()
	require.NoError(t, err)
	l, err := netListen()
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	token := hex.EncodeToString(newNonce())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lines := make(chan childLine, 64)
	var children []*child
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range children {
			_ = c.cmd.Process.Kill()
			<-c.exited
			if t.Failed() {
				t.Logf("rank %d stderr:\n%s", c.rank, c.stderr.String())
			}
		}
	})
	start := func(rank int, gen uint64, hang bool) *child {
		c := &child{rank: rank, exited: make(chan struct{})}
		c.cmd = exec.CommandContext(ctx, exe, "-test.run=^$")
		c.cmd.Env = append(os.Environ(),
			childEnv+"=1",
			EnvMasterAddr+"=127.0.0.1",
			EnvMasterPort+"="+strconv.Itoa(port),
			EnvRank+"="+strconv.Itoa(rank),
			EnvWorldSize+"="+strconv.Itoa(world),
			EnvLocalRank+"="+strconv.Itoa(rank),
			EnvToken+"="+token,
			childGenEnv+"="+strconv.FormatUint(gen, 10),
			childDeadlineEnv+"="+firstDeadline.String(),
			childHangEnv+"="+map[bool]string{true: "1", false: "0"}[hang],
		)
		c.cmd.Stderr = &c.stderr
		out, err := c.cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, c.cmd.Start())
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- childLine{rank, sc.Text()}
			}
			c.err = c.cmd.Wait()
			close(c.exited)
		}()
		mu.Lock()
		children = append(children, c)
		mu.Unlock()
		return c
	}
	// next returns the next line matching prefix, failing on "error" lines.
	next := func(what string, match func(childLine) bool) childLine {
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

	// Generation 0: every rank connects, then the victim is killed before it arrives.
	procs := make(map[int]*child)
	for r := range world {
		procs[r] = start(r, 0, r == victim)
	}
	connected := map[int]bool{}
	for len(connected) < world {
		ln := next("all ranks to connect", func(ln childLine) bool { return ln.text == "connected" })
		connected[ln.rank] = true
	}
	require.NoError(t, procs[victim].cmd.Process.Kill())
	<-procs[victim].exited
	assert.Error(t, procs[victim].err, "the victim was killed")

	for range world - 1 {
		ln := next("survivors to fail generation 0", func(ln childLine) bool { return strings.HasPrefix(ln.text, "fail gen=0") })
		t.Logf("rank %d: %s", ln.rank, ln.text)
		assert.Contains(t, ln.text, "missing=[2]")
		assert.Contains(t, ln.text, `1 of 4 ranks missing: [2]: context deadline exceeded`)
		var elapsed int
		_, err := fmt.Sscanf(ln.text, "fail gen=0 elapsed_ms=%d", &elapsed)
		require.NoError(t, err)
		assert.Less(t, time.Duration(elapsed)*time.Millisecond, firstDeadline+time.Second, "failed within the deadline")
	}

	// Generation 1: a replacement for the victim joins and everyone gets the same id.
	procs[victim] = start(victim, 1, false)
	uids := map[int]string{}
	for len(uids) < world {
		ln := next("generation 1 to succeed", func(ln childLine) bool { return strings.HasPrefix(ln.text, "ok gen=1 uid=") })
		uids[ln.rank] = strings.TrimPrefix(ln.text, "ok gen=1 uid=")
	}
	for r := range world {
		assert.Len(t, uids[r], 256, "rank %d got 128 bytes", r)
		assert.Equal(t, uids[0], uids[r], "rank %d got rank 0's id", r)
		select {
		case <-procs[r].exited:
			assert.NoError(t, procs[r].err, "rank %d exit", r)
		case <-ctx.Done():
			t.Fatalf("rank %d did not exit", r)
		}
	}
}
