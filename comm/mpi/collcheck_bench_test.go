package mpi

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
)

// BenchmarkMPIRankCollectiveCheck is the collective check's cost on MPI: a 4 KiB
// float32 AllReduce with the check off and on, alternating in blocks of 64 on the same
// communicator in the same run (on-minus-off-ns/op, on/off). It runs on the ranks of
// an mpirun job, with a fixed count so that every rank makes the same calls:
//
//	go test -c -o /tmp/mpi.test ./comm/mpi
//	NCCLGO_MPI_RANK_TEST=BenchmarkMPIRankCollectiveCheck mpirun --oversubscribe --allow-run-as-root -np 2 \
//	  -x NCCLGO_MPI_RANK_TEST /tmp/mpi.test -test.run '^$' -test.bench BenchmarkMPIRankCollectiveCheck \
//	  -test.benchtime 4096x -test.benchmem -test.count 5
func BenchmarkMPIRankCollectiveCheck(b *testing.B) {
	if os.Getenv("NCCLGO_MPI_RANK_TEST") != b.Name() {
		b.Skipf("%s runs on the ranks of an mpirun job; see its doc comment for the command", b.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := New(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const count, block = 1024, 64
	buf := make([]float32, count)
	var pin runtime.Pinner
	pin.Pin(&buf[0])
	defer pin.Unpin()
	p := comm.DevicePtr(uintptr(unsafe.Pointer(&buf[0])))
	run := func(on bool, k int) time.Duration {
		c.cfg.check = checkOption{set: true, on: on}
		start := time.Now()
		for range k {
			if err := c.AllReduce(p, count, comm.Float32, comm.Sum); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	// One sub-benchmark, so that the communicator (MPI, initialised once a process) is
	// opened once.
	b.Run("AllReduce4KiB", func(b *testing.B) {
		run(true, 1)
		run(false, 1)
		b.ReportAllocs()
		b.ResetTimer()
		var on, off time.Duration
		ops := 0
		for ops < b.N {
			k := min(block, b.N-ops)
			off += run(false, k)
			on += run(true, k)
			ops += k
		}
		onNs, offNs := float64(on.Nanoseconds())/float64(ops), float64(off.Nanoseconds())/float64(ops)
		b.ReportMetric(onNs, "on-ns/op")
		b.ReportMetric(offNs, "off-ns/op")
		b.ReportMetric(onNs-offNs, "on-minus-off-ns/op")
		b.ReportMetric(onNs/offNs, "on/off")
	})
}
