// Command torchrank is a Go rank for the torchrun tests (comm's torchrun_test.go): it
// joins the job the launcher describes (job.JoinJob), exchanges a unique id through
// the job's store (rank 0 publishes, the others read; then a barrier), and goes on to
// the device step (Job.NewNCCL). It prints one line per step:
//
//	rank R/W store <type> restart <n>
//	rank R uid <hex>
//	rank R device-step: <error or "ready">
//
// With TORCHRANK_FAIL_RANK=R and TORCHELASTIC_RESTART_COUNT=0, rank R exits with
// status 3 after joining (a worker that dies), so that torchrun restarts the workers.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	j, err := job.JoinJob(ctx, job.WithLogger(log))
	if err != nil {
		fmt.Printf("rank ? join failed: %v\n", err)
		os.Exit(1)
	}
	defer j.Close()
	r, w := j.Rank(), j.WorldSize()
	restart := os.Getenv("TORCHELASTIC_RESTART_COUNT")
	fmt.Printf("rank %d/%d store %T restart %s\n", r, w, j.Store(), restart)
	if f := os.Getenv("TORCHRANK_FAIL_RANK"); f == strconv.Itoa(r) && (restart == "" || restart == "0") {
		fmt.Printf("rank %d exits as if it crashed\n", r)
		os.Exit(3)
	}
	s := j.Store()
	key := "torchrank/uid"
	if r == 0 {
		id := make([]byte, 128)
		_, _ = rand.Read(id)
		if err := s.Set(ctx, key, id); err != nil {
			fmt.Printf("rank %d set uid: %v\n", r, err)
			os.Exit(1)
		}
	}
	id, err := s.Get(ctx, key)
	if err == nil {
		err = s.Barrier(ctx, "torchrank/barrier", r, w)
	}
	if err != nil {
		fmt.Printf("rank %d uid exchange: %v\n", r, err)
		os.Exit(1)
	}
	fmt.Printf("rank %d uid %s\n", r, hex.EncodeToString(id[:8]))
	b, err := j.NewNCCL(ctx, nccl.WithElementType(comm.BFloat16))
	if err != nil {
		fmt.Printf("rank %d device-step: %v\n", r, err)
		return
	}
	fmt.Printf("rank %d device-step: ready\n", r)
	_ = b.Close()
}
