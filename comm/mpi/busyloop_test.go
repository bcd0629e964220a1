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

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/mpi"
	rawmpi "github.com/ncclgo/ncclgo/raw/mpi"
)

// The loop of TestMPIBusyLoopWithinTwiceC, the same in Go (busyLoopPhases) and in C
// (testdata/busyloop.c): its operations in order, then the whole loop.
var busyLoopOps = []string{"barrier", "ring", "allreduce", "broadcast", "allgather", "loop"}

const (
	busyLoopBusy       = 64 // busy goroutines (Go) or pthreads (C) on every rank
	busyLoopPhases     = 5  // phases, each with its own busy goroutines; medians over them
	busyLoopIterations = 2  // loops per phase
	busyLoopCount      = 1024
	busyLoopProcsEnv   = "NCCLGO_BUSYLOOP_PROCS"
	busyLoopSettle     = 50 * time.Millisecond // as busyloop.c's SETTLE_US
)

// TestMPIBusyLoopWithinTwiceC checks that MPI calls from Go do not starve when many
// goroutines are runnable: with 64 CPU-bound goroutines on every rank and no rank
// arriving late, a loop of a barrier, a ring exchange (Send and Recv with both
// neighbours, then Sync), an all-reduce, a broadcast and an all-gather costs at most
// twice what the same loop costs a C program calling MPI directly with 64 busy pthreads
// on every rank (testdata/busyloop.c, built here with mpicc), for every operation and
// for the whole loop, comparing medians over 5 phases, at GOMAXPROCS 1 and 2, on 2
// ranks, in the same run. A wait that makes progress only when the waiting goroutine
// gets a P pays one scheduling slice of the busy goroutines per round of a collective
// (or, through the global run queue, one slice of every busy goroutine).
func TestMPIBusyLoopWithinTwiceC(t *testing.T) {
	if inRank(t) {
		mpiRankBusyLoop(t)
		return
	}
	if testing.Short() {
		t.Skip("takes minutes of two busy cores; run without -short")
	}
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
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// Go's scheduler without the race detector (see TestMPIWaitDoesNotStarve).
	bin := os.Args[0]
	if raceEnabled {
		bin = testBinaryWithoutRace(t)
	}
	cbin := filepath.Join(t.TempDir(), "busyloop")
	out, err := exec.Command(mpicc, "-O2", "-o", cbin, filepath.Join("testdata", "busyloop.c"), "-lpthread").CombinedOutput()
	require.NoError(t, err, "mpicc testdata/busyloop.c: %s", out)
	const np = 2
	cMed := busyLoopMedians(t, runMPIProgram(t, np, cbin, strconv.Itoa(busyLoopBusy), strconv.Itoa(busyLoopPhases), strconv.Itoa(busyLoopIterations)))
	for _, procs := range []int{1, 2} {
		goMed := busyLoopMedians(t, runMPIBinary(t, bin, np, t.Name(), fmt.Sprintf("%s=%d", busyLoopProcsEnv, procs)))
		for rank := range np {
			for _, op := range busyLoopOps {
				g, c := goMed[busyLoopKey{rank, op}], cMed[busyLoopKey{rank, op}]
				ratio := float64(g) / float64(max(c, time.Microsecond))
				t.Logf("GOMAXPROCS %d rank %d %-9s Go %12v C %12v %6.2fx", procs, rank, op, g, c, ratio)
				// A phase whose C median is below busyLoopFloor (a non-root's eager
				// broadcast: C returns once the data is there) is compared with the floor:
				// a Go goroutine that waits on a P shared with 64 busy goroutines is woken
				// within a few scheduling slices, not microseconds, whatever the wait.
				if g > 2*max(c, busyLoopFloor) {
					t.Errorf("GOMAXPROCS %d rank %d: %s with %d busy goroutines takes %.1fx what C takes with %d busy threads (Go %v, C %v, floor %v: medians of %d phases)",
						procs, rank, op, busyLoopBusy, ratio, busyLoopBusy, g, c, busyLoopFloor, busyLoopPhases)
				}
			}
		}
	}
}

// busyLoopFloor is the least a phase's C median counts for: five scheduling slices of
// 10 ms, what a goroutine sharing its P with 64 busy ones pays for a few waits in a
// phase of two loops. The code before the progress thread took seconds a phase.
const busyLoopFloor = 50 * time.Millisecond

type busyLoopKey struct {
	rank int
	op   string
}

var busyLoopLine = regexp.MustCompile(`busyloop rank (\d+) phase (\d+) op (\w+) ns (\d+)`)

// busyLoopMedians reads the lines of busyloop.c and of mpiRankBusyLoop and returns each
// rank's median over the phases of each operation.
func busyLoopMedians(t *testing.T, out string) map[busyLoopKey]time.Duration {
	t.Helper()
	all := map[busyLoopKey][]time.Duration{}
	for _, m := range busyLoopLine.FindAllStringSubmatch(out, -1) {
		rank, _ := strconv.Atoi(m[1])
		ns, _ := strconv.ParseInt(m[4], 10, 64)
		k := busyLoopKey{rank, m[3]}
		all[k] = append(all[k], time.Duration(ns))
	}
	med := map[busyLoopKey]time.Duration{}
	for k, v := range all {
		require.Len(t, v, busyLoopPhases, "phases of %v in\n%s", k, out)
		slices.Sort(v)
		med[k] = v[len(v)/2]
	}
	return med
}

// runMPIProgram runs a program on np ranks under mpirun and returns its output.
func runMPIProgram(t *testing.T, np int, prog string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "-np", strconv.Itoa(np), prog}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mpirun %s: %s", prog, out)
	return string(out)
}

// mpiRankBusyLoop is busyloop.c in Go, at the GOMAXPROCS the parent asks for.
func mpiRankBusyLoop(t *testing.T) {
	procs, err := strconv.Atoi(os.Getenv(busyLoopProcsEnv))
	require.NoError(t, err, busyLoopProcsEnv)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	c := newMPI(t)
	defer func() { require.NoError(t, c.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rank, n := c.Rank(), c.WorldSize()
	buf, out := make([]float32, busyLoopCount), make([]float32, busyLoopCount*n)
	left, right := make([]float32, busyLoopCount), make([]float32, busyLoopCount)
	l, r := (rank+n-1)%n, (rank+1)%n
	for p := range busyLoopPhases {
		var ns [6]time.Duration
		var stop atomic.Bool
		var wg sync.WaitGroup
		for range busyLoopBusy {
			wg.Go(func() {
				for !stop.Load() {
				}
			})
		}
		time.Sleep(busyLoopSettle) // the busy goroutines take their turns before the loop
		require.NoError(t, c.Barrier(ctx))
		for range busyLoopIterations {
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
