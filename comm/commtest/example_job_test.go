package commtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// Two ranks start the way two processes of a job do, through job.Connect and a
// rendezvous store on loopback (rank 0 serves it), each on a simulated GPU; they sum a
// buffer. An engine's own bring-up code can be tested like this without a GPU.
func ExampleNewDevices() {
	devices, err := commtest.NewDevices(2)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devices.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the store
	if err != nil {
		fmt.Println(err)
		return
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	sums := make([][]float64, 2)
	for rank := range 2 {
		wg.Go(func() {
			// In a real job: job.Connect(ctx) with MASTER_ADDR, MASTER_PORT, RANK,
			// WORLD_SIZE and LOCAL_RANK in the environment.
			gpu, err := devices.DeviceOption(rank)
			if err != nil {
				fmt.Println(err)
				return
			}
			jc := rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: port, Rank: rank, WorldSize: 2, LocalRank: rank}
			b, err := job.Connect(ctx, job.WithJob(jc), job.WithLogger(slog.New(slog.DiscardHandler)),
				job.WithNCCL(gpu, nccl.WithElementType(comm.BFloat16), nccl.WithWatchdog(0)))
			if err != nil {
				fmt.Println("rank", rank, err)
				return
			}
			defer b.Close()
			buf, _ := devices.Alloc(rank, 2*comm.BFloat16.Size())
			_ = devices.WriteValues(rank, buf, comm.BFloat16, []float64{float64(rank + 1), 0.5})
			if err := b.AllReduce(buf, 2*comm.BFloat16.Size()); err != nil {
				fmt.Println("rank", rank, err)
				return
			}
			sums[rank], _ = devices.ReadValues(rank, buf, comm.BFloat16, 2)
		})
	}
	wg.Wait()
	fmt.Println("rank 0", sums[0])
	fmt.Println("rank 1", sums[1])
	// Output:
	// rank 0 [3 1]
	// rank 1 [3 1]
}
