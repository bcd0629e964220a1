//go:build cgo

package mpi

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/mpibench"
	"github.com/ncclgo/ncclgo/comm/internal/pairbench"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// mpiBenchRounds is the number of alternating rounds of BenchmarkMPIRankAllReduceOverhead:
// each round runs b.N/mpiBenchRounds calls of each side.
const mpiBenchRounds = 15

// BenchmarkMPIRankAllReduceOverhead measures the MPI Communicator's per-call overhead:
// AllReduce (validation, the process lock, the generated cgo call) against a C loop
// calling the same MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM) directly, on the same
// buffer, in the same run. It runs on the ranks of an mpirun job, with a fixed iteration
// count so that every rank makes the same calls:
//
//	go test -c -o /tmp/comm.test ./comm/mpi
//	NCCLGO_MPI_RANK_TEST=BenchmarkMPIRankAllReduceOverhead mpirun --oversubscribe \
//	  --allow-run-as-root -np 2 -x NCCLGO_MPI_RANK_TEST /tmp/comm.test -test.run='^$' \
//	  -test.bench=BenchmarkMPIRankAllReduceOverhead -test.benchtime=3000x -test.benchmem
//
// The sides alternate in rounds (mpiBenchRounds of them, the first side swapping every
// round), and every block of calls starts after an MPI_Barrier outside the timing, so that
// both ranks run the same side at the same time: an MPI_Allreduce's time is the slower
// rank's, and a block measured while the other rank is still in the previous block would
// count its tail. Each rank prints its own line.
//
// Rows: each size at GOMAXPROCS 1 (what Go picks on a rank that mpirun binds to one core,
// its default for up to two ranks) and 2 (what WithMinGOMAXPROCS(2) or mpirun -x
// GOMAXPROCS=2 give), set by the benchmark around the row; cpus is the number of CPUs
// the rank may run on.
//
// Metrics, medians over the rounds (a loaded machine disturbs some rounds; the median
// keeps the others): go/c, the ratio of the Communicator's time to the C loop's in the
// same round, the target; go-ns/op and c-ns/op; raw/c, the same ratio for the generated
// binding (mpi.Allreduce called from Go, out of place, no Communicator), which splits the overhead
// between the binding and comm; floor/c, the same ratio for the C loop called once per MPI
// call from Go (one cgo crossing per call and nothing else but the Communicator's yield
// every 2 ms: the best any Go caller can do); cgo-ns/call, one cgo call of an empty C
// function; go/raw, the Communicator's time against the binding's in the same round, and
// comm-ns/op, the difference of their medians: comm's own cost per call, clearest on one
// rank (-np 1), where MPI_Allreduce does nearly nothing. allocs/op counts the Go sides' allocations (the C loop makes none). The C
// loop runs in chunks of about a millisecond, one cgo call each, and yields as the
// Communicator does (see below). c-csw/op, floor-csw/op and noyield-csw/op count the
// context switches of all the rank's threads (getrusage) per MPI call in one more block
// of the C loop, of the floor, and of the floor without the yields (a longer block, as
// Go's scheduler acts only 10 ms after the last yield): Go's scheduler acting on the
// calls shows there.
//
// What costs what (found with uprobes on the runtime's functions through tracefs, perf
// sched_switch traces, execution traces and the counts above; go1.26.8, Open MPI 4.1.4,
// 2 ranks on the project's 2-core VM; the ranks are not oversubscribed, so Open MPI's
// mpi_yield_when_idle is false and it never calls sched_yield). The loss counts are
// from a stand-alone Go program making the same calls, both ranks together, on the
// loaded machine (64 KiB calls of 40-600 µs):
//
//   - A goroutine that spends nearly all its time in cgo calls is never scheduled anew:
//     Go 1.26's preemptone does not preempt a goroutine in a syscall, and a cgo call is
//     one. Once 10 ms (forcePreemptNS) have passed since it was last scheduled, sysmon's
//     retake takes its P from every call it finds running, each time it looks, and looks
//     again every 20 µs because it keeps succeeding. At 64 KiB, without yields, 11% of
//     the calls lost their P at GOMAXPROCS 1 (2166 handoffp in 20000 calls, 2152 of them
//     from that forced-preemption path) and 5% at 2. Each loss costs a sysmon wake-up,
//     a handoff, at GOMAXPROCS 1 a freshly woken spinning thread, and the exit's
//     reacquisition of a P, all on the rank's one core while MPI polls there:
//     noyield-csw/op is 0.24-0.88 at 64 KiB, c-csw/op mostly below 0.2. The
//     Communicator therefore yields (runtime.Gosched) after a call once 2 ms have
//     passed since the last yield, about a microsecond every 2 ms; that path then
//     disappears (71 of 2128 losses at GOMAXPROCS 1). In this benchmark's 64 KiB rows
//     (both ranks, about 19000-21000 calls a row, two runs each): before, 1593-1842
//     lost Ps, all but a few from that path; now 165-881 at GOMAXPROCS 1 and 250-447 at
//     2, noyield's block included.
//   - With one P, sysmon also retakes the P of any call it sees running across two of
//     its ticks (20 µs or more apart), because no other P is idle (retake's npidle ==
//     0 case, the rest of those 2128 losses), and hands it to a new spinning thread
//     (handoffp, startm). With two Ps one is idle and sysmon leaves a call its P for
//     10 ms: 408 losses in 20000 calls with yields. That is WithMinGOMAXPROCS(2).
//   - Open MPI's nonblocking MPI_Iallreduce (libnbc) polled with short MPI_Test calls
//     would avoid long cgo calls, but is slower than the blocking call in C alone:
//     1.2-2.5x at 8 B and 1.8-2.6x at 64 KiB (C loops of MPI_Iallreduce + MPI_Wait
//     against MPI_Allreduce), so the collectives stay blocking.
//   - --bind-to none (GOMAXPROCS 2 from the affinity) lets the ranks migrate onto each
//     other's cores: 8 B calls of 1.4-51 µs on this loaded machine.
//   - At 8 B the calls are too short for sysmon (2 lost Ps in 7253 calls):
//     the cost is the crossing itself, about 60 ns bare, 100-150 ns next to MPI's own
//     code, in a call of 600-1100 ns.
//
// Figures, rank 0, 3000x, six runs of this benchmark alternating with six of the one
// before (no yields, GOMAXPROCS 1), on the shared 2-core machine under load 6-12 from
// other jobs, ranks at nice -15 (so the spread is wide; rerun on a quiet machine):
// before, go/c 1.20-1.38 at 8 B, 1.19-1.48 at 64 KiB (floor/c 1.19-1.58), 0.99-1.29 at
// 1 MiB. Now, GOMAXPROCS 1: 1.18-1.42 at 8 B, 0.94-1.60 (median 1.26) at 64 KiB,
// 0.97-1.08 at 1 MiB; GOMAXPROCS 2: 1.20-1.40 at 8 B (floor/c 1.18-1.34), 0.97-1.03
// (median 1.03, floor/c's median 1.03) at 64 KiB, 0.83-1.42 at 1 MiB; allocs/op 0.
// (1 MiB's c-ns/op is bimodal, about 170 or 530 µs, between rows and runs whatever the
// GOMAXPROCS, in a stand-alone C-from-Go program too.) So from 64 KiB up the
// Communicator at GOMAXPROCS 2 costs what the floor costs, within the noise of this
// machine, and 1.1x at 8 B is out of reach for any cgo binding here (the floor is
// 1.0-1.3x). On one rank (-np 1: MPI_Allreduce is a 20 ns no-op) the Communicator's own
// cost shows: 128-166 ns per call, of which the binding is the bare crossing (about 95
// ns) and comm's validation and lock about 40 ns. A CPU profile of that run (-np 1,
// -test.cpuprofile, go tool pprof -list AllReduce) put most of comm's part in the
// checks (typedReduce's four calls, none of them inlined), then the lock and unlock
// calls; since AllReduce's valid case passes its checks in one inlined test and the
// lock and unlock take their slow paths out of line, comm-ns/op is 8-53 ns (median
// 17-18) against 48-92 (median 57-61) before, go/raw medians 1.13-1.25 against
// 1.50-1.55 (five runs of each alternating, 1000000x, load 9-11). What is left is the
// process lock's two atomic operations and two calls.
func BenchmarkMPIRankAllReduceOverhead(b *testing.B) {
	if os.Getenv("NCCLGO_MPI_RANK_TEST") != b.Name() {
		b.Skipf("%s runs on the ranks of an mpirun job; see its doc comment for the command", b.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			b.Error(err)
		}
	}()
	for _, bytes := range []int{8, 64 << 10, 1 << 20} {
		for _, procs := range []int{1, 2} {
			b.Run(strconv.Itoa(bytes)+"B/GOMAXPROCS="+strconv.Itoa(procs), func(b *testing.B) {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
				benchMPIAllReduce(b, c, bytes)
			})
		}
	}
}

// benchMPIAllReduce is one row of BenchmarkMPIRankAllReduceOverhead: bytes per call, at
// the GOMAXPROCS the row set.
func benchMPIAllReduce(b *testing.B, c *Communicator, bytes int) {
	count := bytes / 4
	buf := make([]float32, count)
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	p := comm.DevicePtr(uintptr(unsafe.Pointer(&buf[0])))
	dt, op := c.p.types[comm.Float32], c.p.ops[comm.Float32][comm.Sum]
	var goErr, rawErr, cErr, syncErr error
	keep := func(dst *error, err error) {
		if err != nil && *dst == nil {
			*dst = err
		}
	}
	goSide := func(n int) {
		for range n {
			keep(&goErr, c.AllReduce(p, count, comm.Float32, comm.Sum))
		}
	}
	// The Go-side loops other than the Communicator's yield as it does (unlockBlocking:
	// after a call when mpiYieldEvery has passed, the clock read every 32nd call), so
	// that Go's scheduler treats them alike; noyieldSide is the floor without it.
	var last time.Time
	pace := func(i int) {
		if i&31 == 0 || bytes >= mpiAlwaysTimed {
			if now := time.Now(); now.Sub(last) >= mpiYieldEvery {
				last = now
				runtime.Gosched()
			}
		}
	}
	// The binding's side reduces in place too: mpi.InPlacePtr becomes MPI_IN_PLACE in C.
	rawSide := func(n int) {
		for i := range n {
			keep(&rawErr, mpi.Allreduce(mpi.InPlacePtr, unsafe.Pointer(&buf[0]), int32(count), dt, op, c.comm))
			pace(i)
		}
	}
	floorSide := func(n int) {
		for i := range n {
			keep(&rawErr, mpibench.AllReduceLoop(1, unsafe.Pointer(&buf[0]), count, uintptr(dt), uintptr(op), uintptr(c.comm)))
			pace(i)
		}
	}
	noyieldSide := func(n int) {
		for range n {
			keep(&rawErr, mpibench.AllReduceLoop(1, unsafe.Pointer(&buf[0]), count, uintptr(dt), uintptr(op), uintptr(c.comm)))
		}
	}
	cLoop := func(n int) {
		keep(&cErr, mpibench.AllReduceLoop(n, unsafe.Pointer(&buf[0]), count, uintptr(dt), uintptr(op), uintptr(c.comm)))
	}
	barrier := func() { keep(&syncErr, mpibench.Barrier(uintptr(c.comm))) }
	// The C loop runs in chunks of about a millisecond of calls, one cgo call each,
	// yielding between chunks when mpiYieldEvery has passed: the crossings and yields
	// cost nothing measurable against a millisecond, and Go's scheduler leaves the
	// chunks alone (a single C loop of hundreds of milliseconds ran several times
	// slower than the same calls from Go on this machine). Every rank makes the same
	// MPI calls whatever its chunk size.
	barrier()
	t0 := time.Now()
	cLoop(8)
	chunk := max(1, int(time.Millisecond/max(time.Since(t0)/8, 1)))
	cSide := func(n int) {
		for ; n > 0; n -= chunk {
			cLoop(min(n, chunk))
			pace(0)
		}
	}
	rounds := min(mpiBenchRounds, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	comm := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, goSide, cSide)
	b.StopTimer()
	raw := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, rawSide, cSide)
	floor := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, floorSide, cSide)
	own := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, goSide, rawSide)
	cgo := pairbench.AlternateMedian(rounds, b.N/rounds, nil, func(n int) {
		for i := range n {
			mpibench.Nop(uintptr(i))
		}
	}, func(int) {})
	if goErr != nil || rawErr != nil || cErr != nil || syncErr != nil {
		b.Fatalf("communicator: %v; binding: %v; c loop: %v; barrier: %v", goErr, rawErr, cErr, syncErr)
	}
	b.ReportMetric(float64(comm.A.Nanoseconds()), "go-ns/op")
	b.ReportMetric(float64(comm.B.Nanoseconds()), "c-ns/op")
	b.ReportMetric(comm.Ratio, "go/c")
	b.ReportMetric(raw.Ratio, "raw/c")
	b.ReportMetric(floor.Ratio, "floor/c")
	b.ReportMetric(float64(cgo.A)/float64(time.Nanosecond), "cgo-ns/call")
	b.ReportMetric(own.Ratio, "go/raw")
	b.ReportMetric(float64((own.A - own.B).Nanoseconds()), "comm-ns/op")
	// Context switches of the process's threads (voluntary and not) per MPI call,
	// in one more block of each side, untimed: Go's scheduler acting on the calls
	// shows as switches the C loop does not make.
	n := max(b.N/rounds, 1)
	b.ReportMetric(switchesPerCall(n, barrier, floorSide), "floor-csw/op")
	// Without yields Go's scheduler acts only 10 ms after the last one (see
	// mpiYieldEvery), so the floor without them runs in a longer block.
	b.ReportMetric(switchesPerCall(b.N/3, barrier, noyieldSide), "noyield-csw/op")
	b.ReportMetric(switchesPerCall(n, barrier, cSide), "c-csw/op")
	b.ReportMetric(float64(runtime.NumCPU()), "cpus")
}

// switchesPerCall runs side(n) after sync and returns the context switches of the
// process's threads (getrusage: voluntary and involuntary) per call.
func switchesPerCall(n int, sync func(), side func(int)) float64 {
	count := func() int64 {
		var ru syscall.Rusage
		if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
			return 0
		}
		return ru.Nvcsw + ru.Nivcsw
	}
	sync()
	before := count()
	side(n)
	return float64(count()-before) / float64(n)
}
