//go:build cgo

package mpi_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
	"github.com/ncclgo/ncclgo/internal/testenv"
	rawmpi "github.com/ncclgo/ncclgo/raw/mpi"
)

// The loop of TestMPIBusyLoopDoesNotStarve and BenchmarkMPIBusyLoop, the same in Go
// (mpiRankBusyLoop) and in C (testdata/busyloop.c): its operations in order, then the
// whole loop.
var busyLoopOps = []string{"barrier", "ring", "allreduce", "broadcast", "allgather", "loop"}

const (
	busyLoopPhases     = 5 // phases of a round, each with its own busy goroutines
	busyLoopRounds     = 2 // rounds at most in the test: a second one only when a comparison failed
	busyLoopIterations = 2 // loops per phase
	busyLoopCount      = 1024
	busyLoopEnv        = "NCCLGO_BUSYLOOP"     // GOMAXPROCS, busy goroutines, phases, loops per phase
	busyLoopSettle     = 50 * time.Millisecond // as busyloop.c's SETTLE_US
	// busyLoopStarved is the test's bound, Go's median against C's: above what waits
	// that cost one scheduling slice per nap cost (0.02-2.7x; the target of 2x is
	// BenchmarkMPIBusyLoop's), below what waits that make progress only when their
	// goroutine gets a P again cost (see TestMPIBusyLoopDoesNotStarve).
	busyLoopStarved = 6
	// busyLoopSlice is the least a wait costs a goroutine whose P is held by CPU-bound
	// goroutines: it runs again only once the one running has been preempted, which
	// sysmon does after 10 ms (forcePreemptNS in runtime/proc.go). A C thread is
	// scheduled by the kernel, which may run a thread that has just slept ahead of
	// spinning ones; in one CI run the C loop's waits on 2 ranks took 10-90 µs with 64
	// threads spinning beside each, where any Go program's take a slice.
	busyLoopSlice = 10 * time.Millisecond
)

// busyLoopWaits is how many waits each operation of the loop makes per iteration:
// one each (the ring's Sends and Recvs are posted, then Sync waits), five for the
// whole loop.
var busyLoopWaits = map[string]int{"barrier": 1, "ring": 1, "allreduce": 1, "broadcast": 1, "allgather": 1, "loop": 5}

// busyLoopJobs are the jobs the busy loop compares: 2 ranks with 64 busy goroutines
// each, and 4 ranks with 16 each. Both make the goroutines of a rank want 8 to 64 times
// the Ps it has, and the spinning threads (64 and 128 in all) want 32 to 64 times the 2
// cores of the test machine. 4 ranks with 64 each would make the C reference take
// minutes per phase there (256 spinning threads), and the Go loop has no more to show
// with them: a goroutine that waits for a P waits for the slice of every busy goroutine
// of its P, however many there are.
var busyLoopJobs = []struct{ np, busy int }{{2, 64}, {4, 16}}

// TestMPIBusyLoopDoesNotStarve checks that MPI calls from Go do not starve when many
// goroutines are runnable: with CPU-bound goroutines on every rank (64 on 2 ranks, 16 on
// 4) and no rank arriving late, a loop of a barrier, a ring exchange (Send and Recv with
// both neighbours, then Sync), an all-reduce, a broadcast and an all-gather costs less
// than busyLoopStarved (6) times what the same loop costs a C program calling MPI
// directly with as many busy pthreads on every rank (testdata/busyloop.c, built here
// with mpicc), for every operation and for the whole loop, comparing the medians over 5
// phases of what each costs its slowest rank (busyLoopRun), at GOMAXPROCS 1 and 2, in
// the same run. Where C's waits cost less than a Go scheduling slice each (the kernel
// may run a C thread that has just slept ahead of spinning ones; Go has no such
// priority), the comparison is with a slice per wait (busyLoopSlice). A wait that
// makes progress only when the waiting goroutine gets a P
// pays one scheduling slice of every busy goroutine of its P per poll: with Sync and
// Barrier polling MPI_Testall between runtime.Gosched calls (the communicator before
// its progress thread), this test failed on both jobs: over 6x in 7 of the 12
// comparisons on 2 ranks (up to 19.3x) and 3 on 4 ranks (up to 11.2x), the barrier
// worst. The communicator's waits cost at most one slice per nap: 0.02-0.55x C's on
// the shared 2-core machine, 2.7x at worst in CI, where other packages' tests run
// beside this one. How close to C the loop comes, against the target of 2x, is
// BenchmarkMPIBusyLoop's to report: the load of the machine moves it, and a test must
// not fail for that.
//
// A round runs the C program, then the Go ranks at GOMAXPROCS 1, then at 2. When a
// comparison fails, a second round runs all three again and the medians are taken over
// the phases of both rounds, so that a burst of load on the machine during one of the
// runs of the first round does not decide alone.
// The ranks run without the race detector (its scheduler is not Go's: see
// TestMPIWaitDoesNotStarve); a -race run builds them without it.
func TestMPIBusyLoopDoesNotStarve(t *testing.T) {
	if inRank(t) {
		mpiRankBusyLoop(t)
		return
	}
	if testing.Short() {
		t.Skip("takes minutes of two busy cores; run without -short")
	}
	bin, cbin := busyLoopBinaries(t)
	for _, job := range busyLoopJobs {
		t.Run(fmt.Sprintf("%d-ranks", job.np), func(t *testing.T) {
			// runs[0] are C's phases, runs[procs] Go's at GOMAXPROCS procs.
			var runs [3]busyLoopRun
			var failed []string
			for round := 1; round <= busyLoopRounds; round++ {
				busyLoopRound(t, bin, cbin, job.np, job.busy, &runs)
				if failed = busyLoopCompare(t, job.np, job.busy, round, runs); len(failed) == 0 {
					return
				}
			}
			for _, f := range failed {
				t.Error(f)
			}
		})
	}
}

// BenchmarkMPIBusyLoop measures what TestMPIBusyLoopDoesNotStarve checks, against the
// target of 2x: for each job, GOMAXPROCS and operation, the median over the phases of
// what it cost Go's slowest rank, divided by the same for the C program run beside it
// (metrics "<np>r-gmp<procs>-<op>-go/c"; each iteration is one round of every job, a
// minute or two). Run it with
//
//	go test -run '^$' -bench MPIBusyLoop -benchtime 3x ./comm/mpi
//
// Figures, the shared 2-core machine (no GPU): see docs/mpi.md.
func BenchmarkMPIBusyLoop(b *testing.B) {
	if os.Getenv(mpiChildEnv) != "" {
		b.Skip("the ranks run TestMPIBusyLoopDoesNotStarve")
	}
	bin, cbin := busyLoopBinaries(b)
	runs := make([][3]busyLoopRun, len(busyLoopJobs))
	for b.Loop() {
		for i, job := range busyLoopJobs {
			busyLoopRound(b, bin, cbin, job.np, job.busy, &runs[i])
		}
	}
	for i, job := range busyLoopJobs {
		for procs := 1; procs <= 2; procs++ {
			for _, op := range busyLoopOps {
				g, c := busyLoopMedian(runs[i][procs].slowest[op]), busyLoopMedian(runs[i][0].slowest[op])
				b.ReportMetric(float64(g)/float64(c), fmt.Sprintf("%dr-gmp%d-%s-go/c", job.np, procs, op))
			}
		}
	}
}

// busyLoopBinaries returns the test binary the Go ranks run (built without the race
// detector when this one has it) and the C program, built with mpicc. Without Open MPI
// it skips, or fails under NCCLGO_STRICT.
func busyLoopBinaries(tb testing.TB) (bin, cbin string) {
	tb.Helper()
	mpicc, err := exec.LookPath("mpicc")
	if err == nil {
		_, err = exec.LookPath("mpirun")
	}
	if err == nil {
		err = rawmpi.Load()
	}
	if err != nil {
		msg := fmt.Sprintf("Open MPI is missing (%v): %s", err, mpiInstallHint)
		if os.Getenv("NCCLGO_STRICT") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	bin = os.Args[0]
	if testenv.RaceEnabled {
		bin = testBinaryWithoutRace(tb)
	}
	cbin = filepath.Join(tb.TempDir(), "busyloop")
	out, err := exec.Command(mpicc, "-O2", "-o", cbin, filepath.Join("testdata", "busyloop.c"), "-lpthread").CombinedOutput()
	require.NoError(tb, err, "mpicc testdata/busyloop.c: %s", out)
	return bin, cbin
}

// busyLoopRound runs the C program on np ranks with busy threads each, then the Go
// ranks at GOMAXPROCS 1 and 2, and adds their phases to runs.
func busyLoopRound(tb testing.TB, bin, cbin string, np, busy int, runs *[3]busyLoopRun) {
	tb.Helper()
	runs[0].add(tb, np, runMPIProgram(tb, np, cbin, strconv.Itoa(busy), strconv.Itoa(busyLoopPhases), strconv.Itoa(busyLoopIterations)))
	for procs := 1; procs <= 2; procs++ {
		env := fmt.Sprintf("%s=%d %d %d %d", busyLoopEnv, procs, busy, busyLoopPhases, busyLoopIterations)
		runs[procs].add(tb, np, runMPIBinary(tb, bin, np, "TestMPIBusyLoopDoesNotStarve", env))
	}
}

// busyLoopMedian returns the median of v (the upper one of an even count).
func busyLoopMedian(v []time.Duration) time.Duration {
	v = slices.Sorted(slices.Values(v))
	return v[len(v)/2]
}

// busyLoopRun holds the phases of the runs of one program (C, or Go at one GOMAXPROCS):
// for each operation, what it cost the slowest rank in each phase, and what it cost
// each rank (logged).
//
// A collective costs what its slowest rank spends in it: a rank that arrives after its
// peers, or that only receives data already sent (a non-root's broadcast), returns at
// once and leaves the waiting to the others. Which rank that is changes with the skew
// the operations before leave between the ranks, which differs between C and Go for
// reasons that are not the waits' costs; so each operation is compared on its slowest
// rank, phase by phase, and no rank is compared with a rank of C that did not wait.
type busyLoopRun struct {
	slowest map[string][]time.Duration
	ranks   map[busyLoopKey][]time.Duration
}

type busyLoopKey struct {
	rank int
	op   string
}

var busyLoopLine = regexp.MustCompile(`busyloop rank (\d+) phase (\d+) op (\w+) ns (\d+)`)

// add adds the phases printed by busyloop.c or mpiRankBusyLoop on np ranks, and checks
// that every rank printed every operation of every phase.
func (r *busyLoopRun) add(t testing.TB, np int, out string) {
	t.Helper()
	if r.slowest == nil {
		r.slowest, r.ranks = map[string][]time.Duration{}, map[busyLoopKey][]time.Duration{}
	}
	type phaseOp struct {
		phase int
		op    string
	}
	slowest, ranks := map[phaseOp]time.Duration{}, map[phaseOp]int{}
	for _, m := range busyLoopLine.FindAllStringSubmatch(out, -1) {
		rank, _ := strconv.Atoi(m[1])
		phase, _ := strconv.Atoi(m[2])
		ns, _ := strconv.ParseInt(m[4], 10, 64)
		k := phaseOp{phase, m[3]}
		slowest[k] = max(slowest[k], time.Duration(ns))
		ranks[k]++
		r.ranks[busyLoopKey{rank, m[3]}] = append(r.ranks[busyLoopKey{rank, m[3]}], time.Duration(ns))
	}
	require.Len(t, slowest, busyLoopPhases*len(busyLoopOps), "phases and operations in\n%s", out)
	for k, d := range slowest {
		require.Equal(t, np, ranks[k], "ranks that printed %v in\n%s", k, out)
		r.slowest[k.op] = append(r.slowest[k.op], d)
	}
}

// busyLoopCompare logs the medians of the phases, Go's against C's (the slowest rank's,
// and every rank's), and returns the comparisons over busyLoopStarved.
func busyLoopCompare(t *testing.T, np, busy, round int, runs [3]busyLoopRun) []string {
	t.Helper()
	const bound float64 = busyLoopStarved
	median := busyLoopMedian
	var failed []string
	for procs := 1; procs <= 2; procs++ {
		for _, op := range busyLoopOps {
			require.Len(t, runs[procs].slowest[op], round*busyLoopPhases, "Go phases of %s", op)
			require.Len(t, runs[0].slowest[op], round*busyLoopPhases, "C phases of %s", op)
			g, c := median(runs[procs].slowest[op]), median(runs[0].slowest[op])
			// C's cost, or the least Go's scheduler can charge the waits of a phase
			// (a slice each) when C's is less: a wait that starves pays a slice of
			// every busy goroutine of its P, 16 or 64, per poll.
			ref := max(c, time.Duration(busyLoopWaits[op]*busyLoopIterations)*busyLoopSlice)
			ratio := float64(g) / float64(ref)
			var each strings.Builder
			for rank := range np {
				k := busyLoopKey{rank, op}
				fmt.Fprintf(&each, " %v/%v", median(runs[procs].ranks[k]).Round(time.Millisecond), median(runs[0].ranks[k]).Round(time.Millisecond))
			}
			t.Logf("round %d GOMAXPROCS %d %-9s Go %12v C %12v (compared with %12v) %5.2fx (each rank's Go/C:%s)", round, procs, op, g, c, ref, ratio, each.String())
			if ratio > bound {
				failed = append(failed, fmt.Sprintf("%d ranks, GOMAXPROCS %d: %s with %d busy goroutines per rank takes %.1fx what C takes with %d busy threads (or a scheduling slice per wait, where C takes less), over %gx (Go %v, C %v, compared with %v: the slowest rank's, medians of %d phases)",
					np, procs, op, busy, ratio, busy, bound, g, c, ref, round*busyLoopPhases))
			}
		}
	}
	if len(failed) > 0 {
		t.Logf("round %d: %d of %d comparisons over %gx C", round, len(failed), 2*len(busyLoopOps), bound)
	}
	return failed
}

// runMPIProgram runs a program on np ranks under mpirun and returns its output.
func runMPIProgram(t testing.TB, np int, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "-np", strconv.Itoa(np), prog}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mpirun %s: %s", prog, out)
	return string(out)
}

// mpiRankBusyLoop is busyloop.c in Go, with the GOMAXPROCS, busy goroutines, phases and
// loops per phase the parent asks for (busyLoopEnv).
func mpiRankBusyLoop(t *testing.T) {
	var procs, busy, phases, iterations int
	_, err := fmt.Sscan(os.Getenv(busyLoopEnv), &procs, &busy, &phases, &iterations)
	require.NoError(t, err, busyLoopEnv)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rank, n := c.Rank(), c.WorldSize()
	buf, out := make([]float32, busyLoopCount), make([]float32, busyLoopCount*n)
	left, right := make([]float32, busyLoopCount), make([]float32, busyLoopCount)
	l, r := (rank+n-1)%n, (rank+1)%n
	for p := range phases {
		var ns [6]time.Duration
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range busy {
			wg.Go(func() {
				for !stop.Load() {
				}
			})
		}
		time.Sleep(busyLoopSettle) // the busy goroutines take their turns before the loop
		require.NoError(t, c.Barrier(ctx))
		for range iterations {
			t0 := time.Now()
			step := func(i int) {
				t := time.Now()
				ns[i] += t.Sub(t0)
				t0 = t
			}
			require.NoError(t, c.Barrier(ctx))
			step(0)
			require.NoError(t, mpi.Send(c, buf, r, 1))
			require.NoError(t, mpi.Send(c, buf, l, 2))
			require.NoError(t, mpi.Recv(c, left, l, 1))
			require.NoError(t, mpi.Recv(c, right, r, 2))
			require.NoError(t, c.Sync(ctx))
			step(1)
			require.NoError(t, mpi.AllReduce(c, buf, comm.Sum))
			step(2)
			require.NoError(t, mpi.Broadcast(c, buf, 0))
			step(3)
			require.NoError(t, mpi.AllGather(c, buf, out))
			step(4)
		}
		for i := range 5 {
			ns[5] += ns[i]
		}
		stop.Store(true)
		wg.Wait()
		var b strings.Builder
		for i, op := range busyLoopOps {
			fmt.Fprintf(&b, "busyloop rank %d phase %d op %s ns %d\n", rank, p, op, ns[i])
		}
		fmt.Print(b.String())
	}
}

// TestMPIContendedSyncHonoursContext checks the wait that Sync hands to the progress
// thread while goroutines wait for a P: rank 0, at GOMAXPROCS 1 with 8 busy goroutines,
// posts a receive that rank 1 sends only a second later; a Sync whose context ends
// first returns the context's error (the thread stops polling, the receive stays
// pending), and a later Sync completes the receive with rank 1's data.
func TestMPIContendedSyncHonoursContext(t *testing.T) {
	if inRank(t) {
		mpiRankContendedSyncHonoursContext(t)
		return
	}
	runMPI(t, 2, t.Name())
}

func mpiRankContendedSyncHonoursContext(t *testing.T) {
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.Barrier(ctx))
	buf := []int32{0}
	if c.Rank() == 1 {
		time.Sleep(time.Second)
		buf[0] = 42
		require.NoError(t, mpi.Send(c, buf, 0, 7))
		require.NoError(t, c.Sync(ctx))
		require.NoError(t, c.Barrier(ctx))
		return
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	require.NoError(t, mpi.Recv(c, buf, 1, 7))
	before := mpi.Offloads(c)
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	err := c.Sync(short)
	cancelShort()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 30*time.Second, "a hang guard: the wait ends with its context")
	assert.Greater(t, mpi.Offloads(c), before, "the wait went to the progress thread")
	require.NoError(t, c.Sync(ctx))
	assert.Equal(t, int32(42), buf[0])
	stop.Store(true)
	wg.Wait()
	require.NoError(t, c.Barrier(ctx))
}
