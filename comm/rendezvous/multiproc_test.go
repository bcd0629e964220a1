package rendezvous

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/nettest"
	"github.com/ncclgo/ncclgo/comm/internal/proctest"
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
	if addr := os.Getenv(legitChildEnv); addr != "" {
		os.Exit(legitChildMain(addr))
	}
	code := m.Run()
	removeTool()
	os.Exit(code)
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
	// Generation 0's deadline starts once every rank has connected: a process that
	// starts seconds after the others on a loaded machine must not be the one missing.
	if gen == 0 {
		if err := c.Barrier(ctx, "test/connected", cfg.Rank, cfg.WorldSize); err != nil {
			say("error connected barrier: %v", err)
			return 2
		}
	}
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

func TestMultiProcessRendezvousSurvivesAKilledRank(t *testing.T) {
	const world, victim = 4, 2
	const firstDeadline = 2 * time.Second
	port := nettest.Port(t)
	token := hex.EncodeToString(newNonce())

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := proctest.New(t, ctx)
	start := func(rank int, gen uint64, hang bool) *proctest.Proc {
		return job.Start(rank,
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
	}

	// Generation 0: every rank connects, then the victim is killed before it arrives.
	procs := make(map[int]*proctest.Proc)
	for r := range world {
		procs[r] = start(r, 0, r == victim)
	}
	connected := map[int]bool{}
	for len(connected) < world {
		ln := job.Next("all ranks to connect", func(ln proctest.Line) bool { return ln.Text == "connected" })
		connected[ln.Rank] = true
	}
	require.NoError(t, procs[victim].Cmd.Process.Kill())
	<-procs[victim].Exited()
	assert.Error(t, procs[victim].Err(), "the victim was killed")

	for range world - 1 {
		ln := job.Next("survivors to fail generation 0", func(ln proctest.Line) bool { return strings.HasPrefix(ln.Text, "fail gen=0") })
		t.Logf("rank %d: %s", ln.Rank, ln.Text)
		assert.Contains(t, ln.Text, "missing=[2]")
		assert.Contains(t, ln.Text, `1 of 4 ranks missing: [2]: context deadline exceeded`)
		var elapsed int
		_, err := fmt.Sscanf(ln.Text, "fail gen=0 elapsed_ms=%d", &elapsed)
		require.NoError(t, err)
		assert.Less(t, time.Duration(elapsed)*time.Millisecond, firstDeadline+10*time.Second, "failed at the deadline, not later (generous: the machine may be loaded)")
	}

	// Generation 1: a replacement for the victim joins and everyone gets the same id.
	procs[victim] = start(victim, 1, false)
	uids := map[int]string{}
	for len(uids) < world {
		ln := job.Next("generation 1 to succeed", func(ln proctest.Line) bool { return strings.HasPrefix(ln.Text, "ok gen=1 uid=") })
		uids[ln.Rank] = strings.TrimPrefix(ln.Text, "ok gen=1 uid=")
	}
	for r := range world {
		assert.Len(t, uids[r], 256, "rank %d got 128 bytes", r)
		assert.Equal(t, uids[0], uids[r], "rank %d got rank 0's id", r)
		select {
		case <-procs[r].Exited():
			assert.NoError(t, procs[r].Err(), "rank %d exit", r)
		case <-ctx.Done():
			t.Fatalf("rank %d did not exit", r)
		}
	}
}
