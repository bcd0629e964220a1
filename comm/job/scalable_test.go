package job

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// scalableFake is idFake with ncclCommInitRankScalable, which records the ids it is
// given and initialises as CommInitRank from the first.
type scalableFake struct {
	idFake
	mu      sync.Mutex
	got     [][]gpulib.UniqueID
	idsMade int
}

func (f *scalableFake) GetUniqueID() (gpulib.UniqueID, error) {
	f.mu.Lock()
	f.idsMade++
	f.mu.Unlock()
	return f.idFake.GetUniqueID()
}

func (f *scalableFake) CommInitRankScalable(nranks int, ids []gpulib.UniqueID, rank int, cfg gpulib.Config) (gpulib.Comm, error) {
	f.mu.Lock()
	f.got = append(f.got, append([]gpulib.UniqueID(nil), ids...))
	f.mu.Unlock()
	return f.CommInitRank(nranks, ids[0], rank, cfg)
}

// Over torch's TCPStore protocol (torchrun's agent store: the rendezvous made one call
// after another) WithScalableInit brings the job up too: with 2 ids on 3 ranks, ranks 0
// and 2 make them (the first ranks of blocks of 2 and 1), and every rank initialises
// from both, in the same order.
func TestScalableInitOverTorchsProtocol(t *testing.T) {
	leaktest.Check(t)
	_, port := serveStore(t)
	const world = 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	jobs, fakes := map[int]*Job{}, map[int]*scalableFake{}
	for r := range world {
		agentEnv(t, port, r, world, 0)
		f := &scalableFake{idFake: newIDFake()}
		j, err := JoinJob(ctx, withDevice(f), quiet, WithScalableInit(2))
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = j.Close() })
		jobs[r], fakes[r] = j, f
	}
	bs, errs := onRanks([]int{0, 1, 2}, func(r int) (*nccl.Backend, error) { return jobs[r].NewNCCL(ctx) })
	for r := range world {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	want := fakes[0].got
	require.Len(t, want, 1)
	require.Len(t, want[0], 2)
	assert.NotEqual(t, want[0][0], want[0][1], "two ids, made by two ranks")
	for r := range world {
		assert.Equal(t, want, fakes[r].got, "rank %d initialised from the same ids", r)
		assert.Equal(t, map[bool]int{true: 1, false: 0}[r != 1], fakes[r].idsMade, "rank %d made an id", r)
	}
}
