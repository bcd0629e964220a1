//go:build cgo

package comm

import (
	"context"
	"os"
	"runtime"
	"strconv"
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
// round), and every block of calls starts after an MPI_Barrier outside the timing, so
// that both ranks run the same side at the same time: an MPI_Allreduce's time is the
// slower rank's, and a block measured while the other rank is still in the previous
// block would count its tail. Each rank prints its own line.
//
// Metrics, medians over the rounds (a loaded machine disturbs some rounds; the median
// keeps the others): go/c, the ratio of the Communicator's time to the C loop's in the
// same round, the target; go-ns/op and c-ns/op; raw/c, the same ratio for the generated
// binding (mpi.Allreduce called from Go, no Communicator), which splits the overhead
// between the binding and comm; floor/c, the same ratio for the C loop called once per
// MPI call from Go (one cgo crossing per call and nothing else: the best any Go caller
// can do); cgo-ns/call, one cgo call of an empty C function. allocs/op counts the Go sides' allocations (the
// C loop makes none).
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
		b.Run(strconv.Itoa(bytes)+"B", func(b *testing.B) {
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
			rawSide := func(n int) {
				for range n {
					keep(&rawErr, mpi.Allreduce(c.p.inPlace, unsafe.Pointer(&buf[0]), int32(count), dt, op, c.comm))
				}
			}
			floorSide := func(n int) {
				for range n {
					keep(&rawErr, mpibench.AllReduceLoop(1, unsafe.Pointer(&buf[0]), count, uintptr(dt), uintptr(op), uintptr(c.comm)))
				}
			}
			cLoop := func(n int) {
				keep(&cErr, mpibench.AllReduceLoop(n, unsafe.Pointer(&buf[0]), count, uintptr(dt), uintptr(op), uintptr(c.comm)))
			}
			barrier := func() { keep(&syncErr, mpibench.Barrier(uintptr(c.comm))) }
			// The C loop runs in chunks of about a millisecond of calls, one cgo call each:
			// the crossing costs nothing measurable against a millisecond, and no cgo
			// call lasts long enough for Go's scheduler to act on it (after 10 ms sysmon
			// takes the P away even when others are idle), which made single C loops
			// of hundreds of milliseconds several times slower than the same calls
			// from Go on this machine. Every rank makes the same MPI calls whatever its
			// chunk size.
			barrier()
			t0 := time.Now()
			cLoop(8)
			chunk := max(1, int(time.Millisecond/max(time.Since(t0)/8, 1)))
			cSide := func(n int) {
				for ; n > 0; n -= chunk {
					cLoop(min(n, chunk))
				}
			}
			rounds := min(mpiBenchRounds, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			comm := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, goSide, cSide)
			b.StopTimer()
			raw := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, rawSide, cSide)
			floor := pairbench.AlternateMedian(rounds, b.N/rounds, barrier, floorSide, cSide)
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
		})
	}
}
