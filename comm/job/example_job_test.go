package job_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// A job of two processes started by hand, one per GPU of the machine, the way torchrun
// would start them:
//
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 ./engine &
//	MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 ./engine
//
// Rank 0 serves the rendezvous store on MASTER_PORT and creates the NCCL unique id;
// rank 1 reads it there. Each process uses the GPU of its LOCAL_RANK. Set NCCLGO_TOKEN
// to the same secret in both to keep other clients out of the store. The engine's loop
// notices a failed peer (the watchdog) and re-creates the communicator with the other
// ranks, or with a restarted process, in the job's next generation. Run without the
// launcher's variables, as here, Connect says which are missing.
func ExampleConnect() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := job.Connect(ctx, job.WithNCCL(nccl.WithElementType(comm.BFloat16), nccl.WithWatchdog(0))) // 0: every 100 ms
	if err != nil {
		var be *rendezvous.BarrierError
		if errors.As(err, &be) {
			log.Fatalf("ranks %v did not come: %v", be.Missing, err)
		}
		fmt.Println(err)
		return
	}
	defer b.Close()

	var grads comm.DevicePtr // the engine's device buffer
	for step := 0; step < 1000; step++ {
		if err := b.AllReduce(grads, 0); err != nil || !b.IsHealthy() {
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			err := b.AttemptReconnect(rctx) // every rank does the same
			rcancel()
			if err != nil {
				log.Fatal(err)
			}
		}
	}
	// Output:
	// join job: invalid configuration: no launcher describes this process (torchrun, srun, mpirun, LeaderWorkerSet, PyTorchJob, JobSet); looked for RANK, OMPI_COMM_WORLD_RANK, PMIX_RANK, SLURM_PROCID, WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MASTER_ADDR, MASTER_PORT, SLURM_JOB_NODELIST, SLURM_LAUNCH_NODE_IPADDR, OMPI_COMM_WORLD_LOCAL_SIZE, LWS_GROUP_SIZE, LWS_WORKER_INDEX, PET_NNODES, PET_NODE_RANK, JOBSET_NAME
	// MASTER_ADDR is not set
	// MASTER_PORT is not set
	// WORLD_SIZE is not set
	// RANK is not set
	// LOCAL_RANK is not set
}
