package job

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/proctest"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Environment of a rank process started by TestProcessesRendezvous... (besides
// torchrun's variables, which the child reads through Connect's JoinJob).
const (
	procChildEnv    = "NCCLGO_COMM_TEST_CHILD"    // "1": run childMain instead of the tests
	procHangEnv     = "NCCLGO_COMM_TEST_HANG"     // "1": join the job, then wait to be killed
	procDeadlineEnv = "NCCLGO_COMM_TEST_DEADLINE" // deadline of the first bring-up attempt
	procMeetEnv     = "NCCLGO_COMM_TEST_MEET"     // "1": wait for the whole world to join first
)

func TestMain(m *testing.M) {
	if os.Getenv(procChildEnv) == "1" {
		os.Exit(childMain())
	}
	if os.Getenv(mpiRankEnv) == "" {
		clearLauncherEnv()
	}
	os.Exit(m.Run())
}

// mpiRankEnv names the test a rank process of an mpirun job started by the MPI tests
// runs (mpiChildEnv in communicator_test.go, of package comm_test).
const mpiRankEnv = "NCCLGO_MPI_RANK_TEST"

// launcherEnv is every variable through which a launcher (torchrun, srun, mpirun, a
// Kubernetes controller) or a store setting tells Connect and JoinJob who this process is.
var launcherEnv = []string{
	rendezvous.EnvMasterAddr, rendezvous.EnvMasterPort, rendezvous.EnvRank, rendezvous.EnvWorldSize,
	rendezvous.EnvLocalRank, rendezvous.EnvToken, rendezvous.EnvSlurmProcID, rendezvous.EnvSlurmNTasks,
	rendezvous.EnvSlurmLocalID, rendezvous.EnvSlurmJobNodeList, rendezvous.EnvSlurmLaunchNode,
	rendezvous.EnvOMPIRank, rendezvous.EnvOMPISize, rendezvous.EnvOMPILocalRank, rendezvous.EnvOMPILocalSize,
	rendezvous.EnvPMIxRank, EnvStorePort, EnvUseAgentStore, EnvRestartCount,
	rendezvous.EnvLWSLeaderAddress, rendezvous.EnvLWSGroupSize, rendezvous.EnvLWSWorkerIndex,
	rendezvous.EnvPETNNodes, rendezvous.EnvPETNodeRank, rendezvous.EnvPETNProcPerNode, rendezvous.EnvPETMasterAddr,
	rendezvous.EnvPETMasterPort, rendezvous.EnvJobCompletionIndex, rendezvous.EnvJobSetName, rendezvous.EnvLocalWorldSize,
	rendezvous.EnvTorchElasticRunID,
}

// clearLauncherEnv unsets launcherEnv in the test process itself (not in the rank
// processes the tests start, which get their variables from the test): run inside a
// job's allocation (an salloc shell, a torchrun or mpirun job), the tests and examples
// would otherwise join that job. It says on stderr which it unset.
func clearLauncherEnv() {
	var unset []string
	for _, name := range launcherEnv {
		if _, ok := os.LookupEnv(name); ok {
			unset = append(unset, name)
			_ = os.Unsetenv(name)
		}
	}
	if len(unset) > 0 {
		fmt.Fprintf(os.Stderr, "comm tests: unset the launcher's variables %v of this shell; each test sets its own\n", unset)
	}
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
	// The first attempt's deadline starts once every rank has joined: a process that
	// starts seconds after the others on a loaded machine must not be the one missing.
	if os.Getenv(procMeetEnv) == "1" {
		if err := j.Store().Barrier(ctx, "test/joined", j.Rank(), j.WorldSize()); err != nil {
			say("error joined barrier: %v", err)
			return 2
		}
	}
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
		say("ok gen=%d uid=%s", memberOf(b).generation(), hex.EncodeToString(ids[len(ids)-1][:]))
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

// The test binary starts itself as the ranks of a job on loopback. Rank 2 joins the job
// and is killed before its bring-up: the others fail within their deadline naming rank
// 2. A restarted rank 2 joins them in the next generation, where every rank gets rank
// 0's unique id.
func TestProcessesRendezvousSurviveAKilledRank(t *testing.T) {
	const world, victim = 4, 2
	const firstDeadline = 2 * time.Second
	port := freePort(t)
	token := hex.EncodeToString([]byte(t.Name()))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job := proctest.New(t, ctx)
	start := func(rank int, hang, first bool) *proctest.Proc {
		return job.Start(rank,
			procChildEnv+"=1",
			rendezvous.EnvMasterAddr+"=127.0.0.1",
			rendezvous.EnvMasterPort+"="+strconv.Itoa(port),
			rendezvous.EnvRank+"="+strconv.Itoa(rank),
			rendezvous.EnvWorldSize+"="+strconv.Itoa(world),
			rendezvous.EnvLocalRank+"="+strconv.Itoa(rank),
			rendezvous.EnvToken+"="+token,
			procDeadlineEnv+"="+firstDeadline.String(),
			procHangEnv+"="+map[bool]string{true: "1", false: "0"}[hang],
			procMeetEnv+"="+map[bool]string{true: "1", false: "0"}[first],
		)
	}

	ranks := map[int]*proctest.Proc{}
	for r := range world {
		ranks[r] = start(r, r == victim, true)
	}
	joined := map[int]bool{}
	for len(joined) < world {
		joined[job.Next("every rank to join", func(ln proctest.Line) bool { return ln.Text == "joined" }).Rank] = true
	}
	require.NoError(t, ranks[victim].Cmd.Process.Kill())
	<-ranks[victim].Exited()

	for range world - 1 {
		ln := job.Next("the others to fail", func(ln proctest.Line) bool { return strings.HasPrefix(ln.Text, "fail ") })
		t.Logf("rank %d: %s", ln.Rank, ln.Text)
		assert.Contains(t, ln.Text, "missing=[2]")
		assert.Contains(t, ln.Text, "generation 0")
		assert.Contains(t, ln.Text, "1 of 4 ranks missing: [2]")
		var elapsed int
		_, err := fmt.Sscanf(ln.Text, "fail elapsed_ms=%d", &elapsed)
		require.NoError(t, err)
		// Its deadline ended the wait, not the test's: it failed after waiting about
		// that long (the bound is generous, for a loaded machine).
		assert.Less(t, time.Duration(elapsed)*time.Millisecond, firstDeadline+15*time.Second, "rank %d failed after its deadline, not much later", ln.Rank)
	}

	ranks[victim] = start(victim, false, false)
	uids := map[int]string{}
	for len(uids) < world {
		ln := job.Next("generation 1", func(ln proctest.Line) bool { return strings.HasPrefix(ln.Text, "ok ") })
		assert.True(t, strings.HasPrefix(ln.Text, "ok gen=1 uid="), "rank %d: %s", ln.Rank, ln.Text)
		uids[ln.Rank] = ln.Text[strings.LastIndex(ln.Text, "=")+1:]
	}
	for r := range world {
		assert.Len(t, uids[r], 256, "rank %d got 128 bytes", r)
		assert.Equal(t, uids[0], uids[r], "rank %d got rank 0's id", r)
		select {
		case <-ranks[r].Exited():
			assert.NoError(t, ranks[r].Err(), "rank %d exit", r)
		case <-ctx.Done():
			t.Fatalf("rank %d did not exit", r)
		}
	}
}
