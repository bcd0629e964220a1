//go:build cgo

package comm

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

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
//	go test -c -o /tmp/comm.test ./comm
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
// Metrics, medians over the rounds (a loaded machine disturbs some rounds; the median
// keeps the others): go/c, the ratio of the Communicator's time to the C loop's in the
// same round, the target; go-ns/op and c-ns/op; raw/c, the same ratio for the generated
// binding (mpi.Allreduce called from Go, no Communicator), which splits the overhead
// between the binding and comm; floor/c, the same ratio for the C loop called once per MPI
// call from Go (one cgo crossing per call and nothing else: the best any Go caller can
// do); cgo-ns/call, one cgo call of an empty C function. allocs/op counts the Go sides'
// allocations (the C loop makes none). The C loop runs in chunks of about a millisecond,
// one cgo call each (see below).
//
// What it showed on the shared 2-core machine of the project (2 ranks, each bound by
// mpirun to one core, so GOMAXPROCS=1; load 8-17 from other jobs), rank 0, 3000x, six
// runs: MPI_Allreduce from the C loop takes 0.9-1.3 µs at 8 B, 23-49 µs at 64 KiB,
// 0.16-0.61 ms at 1 MiB; one bare cgo call 33-100 ns. go/c is 1.14-1.34 at 8 B (before the
// uncheckedPointers binding and the lock-path changes: 1.39-1.44), 1.27-1.38 at 64 KiB,
// 0.99-1.07 at 1 MiB (one disturbed run: 1.36, its floor/c 0.69); allocs/op 0. The floor,
// the same C MPI_Allreduce entered once per call from Go with nothing else, is 1.11-1.19
// at 8 B (1.43 in the most loaded run) and 1.27-1.56 at 64 KiB: a Go caller pays that much
// more than a C loop here whatever it does around the call, so the targets of issue 12
// (1.1x at 8 B, within 2% from 64 KiB) are out of reach on this machine for any cgo
// binding; go/c stays within 0.12 of floor/c, and raw/c (the generated binding alone) is
// at or below floor/c. On one rank (-np 1: MPI_Allreduce is a 20 ns no-op) the
// Communicator's own cost shows: 128-166 ns per call (221-262 ns before), of which the
// binding is the bare crossing (raw/c = floor/c, about 95 ns) and comm's validation and
// lock about 40 ns.
func BenchmarkMPIRankAllReduceOverhead(b *testing.B) {
	if os.Getenv("NCCLGO_MPI_RANK_TEST") != b.Name() {
		b.Skipf("%s runs on the ranks of an mpirun job; see its doc comment for the command", b.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := NewMPI(ctx)
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
func benchMPIAllReduce(b *testing.B, c *MPICommunicator, bytes int) {
	count := bytes / 4
	buf := make([]float32, count)
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	p := DevicePtr(uintptr(unsafe.Pointer(&buf[0])))
	dt, op := c.p.types[Float32], c.p.ops[Float32][Sum]
	var goErr, rawErr, cErr, syncErr error
	keep := func(dst *error, err error) {
		if err != nil && *dst == nil {
			*dst = err
		}
	}
	goSide := func(n int) {
		for range n {
			keep(&goErr, c.AllReduce(p, count, Float32, Sum))
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
	rawSide := func(n int) {
		for i := range n {
			keep(&rawErr, mpi.Allreduce(c.p.inPlace, unsafe.Pointer(&buf[0]), int32(count), dt, op, c.comm))
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
	// Without yields Go's scheduler acts only after 10 ms without one (see
	// mpiYieldEvery), so noyield runs in 3 rounds of longer blocks.
	noyield := pairbench.AlternateMedian(3, b.N/3, barrier, noyieldSide, cSide)
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
	b.ReportMetric(noyield.Ratio, "noyield/c")
	b.ReportMetric(float64(cgo.A)/float64(time.Nanosecond), "cgo-ns/call")
	// Context switches of the process's threads (voluntary and not) per MPI call,
	// in one more block of each side, untimed: Go's scheduler acting on the calls
	// shows as switches the C loop does not make.
	n := max(b.N/rounds, 1)
	b.ReportMetric(switchesPerCall(n, barrier, floorSide), "floor-csw/op")
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
