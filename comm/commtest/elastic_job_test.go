package commtest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/job"
	"github.com/ncclgo/ncclgo/comm/nccl"
	"github.com/ncclgo/ncclgo/comm/rendezvous"
)

// sumOnEach runs an all-reduce of (rank+1) over bs, rank r on device dev[r], and
// checks that every rank gets the sum.
func (j *simJob) sumOnEach(bs []*nccl.Backend, dev []int) error {
	errs := make([]error, len(bs))
	var wg sync.WaitGroup
	for r, b := range bs {
		wg.Go(func() {
			p, err := j.devs.Alloc(dev[r], 2)
			if err == nil {
				err = j.devs.WriteValues(dev[r], p, comm.BFloat16, []float64{float64(r + 1)})
			}
			if err == nil {
				err = b.AllReduce(p, 2)
			}
			var v []float64
			if err == nil {
				v, err = j.devs.ReadValues(dev[r], p, comm.BFloat16, 1)
			}
			if want := float64(len(bs) * (len(bs) + 1) / 2); err == nil && v[0] != want {
				err = fmt.Errorf("sum %v, want %v", v[0], want)
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d of %d: %w", r, len(bs), err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestJobTakesAReplacementIntoAShrunkJobWithGrow runs the elastic flow through
// comm/job: three ranks, one dies, the survivors Shrink, and a replacement process
// comes with job.ConnectGrow while the survivors Grow (finding each other through the
// job's store); the grown communicator then reconnects as a whole.
func TestJobTakesAReplacementIntoAShrunkJobWithGrow(t *testing.T) {
	j, err := newJob(3, nccl.WithTimeout(20*time.Second))
	require.NoError(t, err)
	defer j.devs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bs, err := j.connectAll(ctx)
	require.NoError(t, err)
	defer func() {
		for _, b := range bs {
			_ = b.Close()
		}
	}()
	require.NoError(t, j.sumOnEach(bs, []int{0, 1, 2}))

	require.NoError(t, j.devs.Kill(2))
	_ = bs[2].Close()
	shrunk := make([]*nccl.Backend, 2)
	for r, err := range onEachRank(bs[:2], func(r int, b *nccl.Backend) (err error) {
		shrunk[r], err = b.Shrink(ctx, []int{2})
		return err
	}) {
		require.NoError(t, err, "shrink on rank %d", r)
	}
	defer func() {
		for _, b := range shrunk {
			_ = b.Close()
		}
	}()
	require.NoError(t, j.sumOnEach(shrunk, []int{0, 1}))

	require.NoError(t, j.devs.Revive(2))
	grown := make([]*nccl.Backend, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Go(func() { // the replacement process
		dev, err := j.devs.DeviceOption(2)
		if err == nil {
			cfg := rendezvous.Config{MasterAddr: "127.0.0.1", MasterPort: j.port, Rank: 2, WorldSize: 3, LocalRank: 2}
			grown[2], err = job.ConnectGrow(ctx, job.WithJob(cfg), job.WithNCCL(append([]nccl.Option{dev}, j.opts...)...))
		}
		errs[2] = err
	})
	for r, b := range shrunk {
		wg.Go(func() { grown[r], errs[r] = b.Grow(ctx, 3, nil) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "grow on rank %d", r)
	}
	defer func() {
		for _, b := range grown {
			_ = b.Close()
		}
	}()
	require.NoError(t, j.sumOnEach(grown, []int{0, 1, 2}))

	// The grown communicator is the job's now: all three reconnect together.
	for r, err := range onEachRank(grown, func(_ int, b *nccl.Backend) error { return b.AttemptReconnect(ctx) }) {
		require.NoError(t, err, "reconnect on rank %d", r)
	}
	require.NoError(t, j.sumOnEach(grown, []int{0, 1, 2}))
}
