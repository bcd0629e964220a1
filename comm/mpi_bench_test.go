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
)

// BenchmarkMPIRankAllReduceOverhead measures the MPI Communicator's per-call overhead:
// AllReduce (validation, the process lock, the generated cgo call) against a C loop
// calling the same MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM) directly, alternating in
// blocks in the same run on the same buffer. It runs on the ranks of an mpirun job, with a
// fixed iteration count so that every rank makes the same calls:
//
//	go test -c -o /tmp/comm.test ./comm
//	NCCLGO_MPI_RANK_TEST=BenchmarkMPIRankAllReduceOverhead mpirun --oversubscribe \
//	  --allow-run-as-root -np 2 -x NCCLGO_MPI_RANK_TEST /tmp/comm.test -test.run='^$' \
//	  -test.bench=BenchmarkMPIRankAllReduceOverhead -test.benchtime=5000x -test.benchmem
//
// Metrics: go-ns/op and c-ns/op (medians over the blocks are not needed: both sides
// share every disturbance), and go/c, their ratio; allocs/op counts the Go side's
// allocations (the C loop makes none).
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
			dt, op := uintptr(c.p.types[Float32]), uintptr(c.p.ops[Float32][Sum])
			var goErr, cErr error
			goSide := func(n int) {
				for range n {
					if err := c.AllReduce(p, count, Float32, Sum); err != nil && goErr == nil {
						goErr = err
					}
				}
			}
			cSide := func(n int) {
				if err := mpibench.AllReduceLoop(n, unsafe.Pointer(&buf[0]), count, dt, op, uintptr(c.comm)); err != nil && cErr == nil {
					cErr = err
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			tg, tc := pairbench.Alternate(b.N, 250, goSide, cSide)
			b.StopTimer()
			if goErr != nil || cErr != nil {
				b.Fatalf("go side: %v; c side: %v", goErr, cErr)
			}
			b.ReportMetric(float64(tg.Nanoseconds())/float64(b.N), "go-ns/op")
			b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "c-ns/op")
			b.ReportMetric(float64(tg)/float64(tc), "go/c")
		})
	}
}
