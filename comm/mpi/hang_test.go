//go:build cgo && linux

package mpi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// The hang tests run real hangs under mpirun, as an operator meets them: the ranks
// dump on SIGUSR1 and SIGTERM (DumpOnSignal); the test sends SIGUSR1 to mpirun, which
// forwards it to every rank, reads the dumps, and ends the job with SIGTERM to mpirun
// (its abort), which must end every rank by the signal after its dump.
//
// The scenario (hangScenarioEnv) on N ranks (2 or 4): the world "mpi:0" is split into
// "mpi:0:split1", by parity on 4 ranks (parts [0 2] and [1 3]), one part of both ranks
// on 2; the skipper is rank 0's partner (rank 2 on 4 ranks, rank 1 on 2).
//   - skip: three rounds of an all-reduce on the part then one on the world; the
//     skipper skips its third on the part, so rank 0 blocks there and never reaches
//     the world's third all-reduce, where the others wait.
//   - mismatch: one all-reduce on the world, then one on the part with 1,024 elements,
//     512 on the skipper.
const (
	// sigkillAfter is mpirun's odls_base_sigkill_timeout here: on SIGTERM, mpirun
	// sends its ranks SIGCONT, SIGTERM this long after, and SIGKILL as long again
	// after that (measured with Open MPI 4.1).
	sigkillAfter    = 8 * time.Second
	hangScenarioEnv = "NCCLGO_TEST_HANG_SCENARIO"
	hangDirEnv      = "NCCLGO_TEST_HANG_DIR"
)

func TestMPIHangSkippedCollectiveNamesTheCauseFirst(t *testing.T) {
	if inRank(t) {
		hangRank(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-ranks", np), func(t *testing.T) {
			skipper := hangSkipper(np)
			vs, report := runHang(t, np, "skip")
			cause := vs[0]
			require.Equal(t, "mpi:0:split1", cause.Group.Name, "the cause first:\n%s", report)
			require.Equal(t, flightrec.Missing, cause.Problem, report)
			require.Equal(t, []int{skipper}, cause.Culprits, report)
			require.False(t, cause.Victim(), report)
			victim := vs[1]
			require.Equal(t, "mpi:0", victim.Group.Name, report)
			require.Equal(t, []int{0}, victim.Culprits, report)
			require.True(t, victim.Victim(), "rank 0 waits in the part:\n%s", report)
			require.Equal(t, "mpi:0:split1", victim.Victims[0].Group.Name, report)
			first, _, _ := strings.Cut(report, "\n")
			require.Contains(t, first, `"mpi:0:split1"`, report)
		})
	}
}

func TestMPIHangCountMismatchOfTwoNamesNoCulprit(t *testing.T) {
	if inRank(t) {
		hangRank(t)
		return
	}
	for _, np := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d-ranks", np), func(t *testing.T) {
			vs, report := runHang(t, np, "mismatch")
			v := vs[0]
			require.Equal(t, "mpi:0:split1", v.Group.Name, report)
			require.Equal(t, []int{0, hangSkipper(np)}, v.Group.Ranks, report)
			require.Equal(t, flightrec.Mismatch, v.Problem, report)
			require.Empty(t, v.Culprits, "two ranks, two calls, nothing else:\n%s", report)
			require.Contains(t, report, "ranks [0] called all_reduce in [[1024]]")
			require.Contains(t, report, fmt.Sprintf("ranks [%d] called all_reduce in [[512]]", hangSkipper(np)))
		})
	}
}

func hangSkipper(np int) int {
	if np == 2 {
		return 1
	}
	return 2
}

// hangRank is a rank's body: it runs the scenario on a goroutine, says it is ready
// once its recorder holds the scenario's last operation, and waits for the signal
// that ends it.
func hangRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mpi.New(ctx, mpi.WithFlightRecorder(64))
	require.NoError(t, err)
	rec := c.FlightRecorder()
	require.NotNil(t, rec)
	rec.DumpOnSignal(context.Background(), nil, syscall.SIGUSR1, syscall.SIGTERM)
	np, rank := c.WorldSize(), c.Rank()
	color := 0
	if np > 2 {
		color = rank % 2
	}
	part, err := c.Split(ctx, color, rank)
	require.NoError(t, err)
	p := part.(*mpi.Communicator)
	skipper := rank == hangSkipper(np)
	scenario := os.Getenv(hangScenarioEnv)
	// The last operation this rank records: its group and collective number.
	lastGroup, lastSeq := "mpi:0", int64(3)
	// final is closed just before the rank's last call: its dumps are read (below)
	// only from then on, so that no dump notes a completion before the rank's next
	// record does.
	final := make(chan struct{})
	var once sync.Once
	last := func() { once.Do(func() { close(final) }) }
	go func() {
		buf := make([]float32, 1024)
		// The rank computes between its calls: what separates an operation's
		// completion from the next record, wider than the recorder's clock period.
		compute := func() { time.Sleep(30 * time.Millisecond) }
		switch scenario {
		case "skip":
			for i := 1; i <= 3; i++ {
				if i < 3 || !skipper {
					if i == 3 && rank == 0 {
						last()
					}
					_ = mpi.AllReduce(p, buf, comm.Sum)
					compute()
				}
				if i == 3 {
					last()
				}
				_ = mpi.AllReduce(c, buf, comm.Sum)
				compute()
			}
		case "mismatch":
			_ = mpi.AllReduce(c, buf, comm.Sum)
			compute()
			n := 1024
			if skipper {
				n = 512
			}
			last()
			_ = mpi.AllReduce(p, buf[:n], comm.Sum) // it may fail or return: either is fine here
		}
	}()
	switch {
	case scenario == "skip" && rank == 0:
		lastGroup = "mpi:0:split1"
	case scenario == "mismatch":
		lastGroup, lastSeq = "mpi:0:split1", 1
	}
	select {
	case <-final:
	case <-time.After(time.Minute): // a hang guard
		t.Fatalf("rank %d did not reach its last call", rank)
	}
	deadline := time.Now().Add(time.Minute) // a hang guard
	for {
		var b strings.Builder
		require.NoError(t, rec.Dump(&b))
		tr, err := flightrec.ReadTrace(strings.NewReader(b.String()))
		require.NoError(t, err)
		if n := len(tr.Entries); n > 0 && tr.Entries[n-1].Group == lastGroup && tr.Entries[n-1].CollectiveSeq == lastSeq {
			break
		}
		require.True(t, time.Now().Before(deadline), "rank %d did not record %s #%d", rank, lastGroup, lastSeq)
		time.Sleep(5 * time.Millisecond)
	}
	ready := filepath.Join(os.Getenv(hangDirEnv), "ready_"+strconv.Itoa(rank))
	require.NoError(t, os.WriteFile(ready+".tmp", []byte(strconv.Itoa(os.Getpid())), 0o644))
	require.NoError(t, os.Rename(ready+".tmp", ready))
	time.Sleep(10 * time.Minute) // until SIGTERM ends the rank
	t.Fatalf("rank %d still runs 10 minutes after it was ready", rank)
}

// runHang runs scenario on np ranks, takes their dumps with SIGUSR1 to mpirun, checks
// that each completed operation carries the time it completed, ends the job with
// SIGTERM to mpirun, checks that every rank dumped again and ended right after, and
// returns Analyze's verdicts and Report's text on the first dumps.
func runHang(t *testing.T, np int, scenario string) ([]flightrec.Verdict, string) {
	t.Helper()
	mpirun := mpirunOrSkip(t)
	dir := t.TempDir()
	prefix := filepath.Join(dir, "rank_")
	test := strings.Split(t.Name(), "/")[0]
	env := []string{mpiChildEnv + "=" + test, hangScenarioEnv + "=" + scenario, hangDirEnv + "=" + dir, "NCCLGO_FR_DUMP_FILE=" + prefix}
	// mpirun sends SIGKILL a while after SIGTERM (1 s by default): longer here, so
	// that a loaded machine gives the ranks time to dump, and a rank that swallows
	// SIGTERM lives long enough after its dump to tell.
	args := []string{"--oversubscribe", "--allow-run-as-root", "--mca", "odls_base_sigkill_timeout", strconv.Itoa(int(sigkillAfter / time.Second)), "-np", strconv.Itoa(np)}
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		args = append(args, "-x", k)
	}
	args = append(args, os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd := exec.Command(mpirun, args...)
	cmd.Env = append(os.Environ(), env...)
	outFile, err := os.Create(filepath.Join(dir, "mpirun.out"))
	require.NoError(t, err)
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	output := func() string { b, _ := os.ReadFile(outFile.Name()); return string(b) }
	require.NoError(t, cmd.Start())
	done := make(chan struct{}) // closed when mpirun has ended, with waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	// waitFor polls cond until it holds; the job ending first, or a minute (a hang
	// guard), fails the test.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			select {
			case <-done:
				t.Fatalf("the job ended (%v) before %s:\n%s", waitErr, what, output())
			default:
			}
			require.True(t, time.Now().Before(deadline), "no %s after a minute:\n%s", what, output())
			time.Sleep(10 * time.Millisecond)
		}
	}
	all := func(name string) func() bool {
		return func() bool {
			for r := range np {
				if _, err := os.Stat(filepath.Join(dir, name+strconv.Itoa(r))); err != nil {
					return false
				}
			}
			return true
		}
	}
	waitFor("ready rank", all("ready_"))

	// SIGUSR1 to mpirun reaches every rank.
	require.NoError(t, cmd.Process.Signal(syscall.SIGUSR1))
	waitFor("dump from every rank after SIGUSR1 to mpirun", all("rank_"))
	traces, err := flightrec.ReadDir(dir, "rank_")
	require.NoError(t, err)
	require.Len(t, traces, np)
	// MPI's operations block: each completed before the rank recorded the next, and
	// its completion time says so (not the time of a later record, or of the dump,
	// that noted it).
	for _, tr := range traces {
		for i, e := range tr.Entries[:len(tr.Entries)-1] {
			next := tr.Entries[i+1]
			require.Equal(t, "completed", e.State)
			require.LessOrEqual(t, e.Completed, next.Created, "rank %d's %s #%d completed at %v, after it recorded %s #%d (%v)",
				tr.Rank, e.Group, e.Seq(), time.Unix(0, e.Completed), next.Group, next.Seq(), time.Unix(0, next.Created))
		}
	}
	vs := flightrec.Analyze(traces)
	var b strings.Builder
	require.NoError(t, flightrec.Report(&b, vs))
	t.Logf("commtrace on %d ranks, %s:\n%s", np, scenario, b.String())
	for r := range np {
		require.NoError(t, os.Remove(prefix+strconv.Itoa(r)))
	}

	// SIGTERM to mpirun (its abort): every rank dumps, then ends by the signal at
	// once, not when mpirun kills it.
	pids := make([]int, np)
	for r := range np {
		b, err := os.ReadFile(filepath.Join(dir, "ready_"+strconv.Itoa(r)))
		require.NoError(t, err)
		pids[r], err = strconv.Atoi(string(b))
		require.NoError(t, err)
	}
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitFor("dump from every rank after SIGTERM to mpirun", all("rank_"))
	dumped := time.Now()
	for r, pid := range pids {
		for alive(pid) {
			require.Less(t, time.Since(dumped), sigkillAfter*3/4,
				"rank %d (pid %d) lives on after its dump on SIGTERM: the signal was swallowed\n%s", r, pid, output())
			time.Sleep(10 * time.Millisecond)
		}
	}
	select {
	case <-done:
	case <-time.After(2*sigkillAfter + time.Minute): // a hang guard
		t.Fatalf("the job still ran %v after SIGTERM to mpirun:\n%s", 2*sigkillAfter+time.Minute, output())
	}
	t.Logf("the ranks dumped and ended %v after SIGTERM to mpirun, the job %v after (%v):\n%s",
		dumped.Sub(start).Round(time.Millisecond), time.Since(start).Round(time.Millisecond), waitErr, output())
	return vs, b.String()
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ...": the state follows the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// mpirunOrSkip returns mpirun's path, or skips (fails under NCCLGO_STRICT) without
// Open MPI.
func mpirunOrSkip(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("mpirun")
	if err != nil {
		if os.Getenv("NCCLGO_STRICT") != "" {
			t.Fatalf("mpirun is missing: %s", mpiInstallHint)
		}
		t.Skipf("mpirun is missing: %s", mpiInstallHint)
	}
	return path
}
