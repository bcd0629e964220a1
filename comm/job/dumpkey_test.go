package job

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/leaktest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// An operator sets DumpKey's first key in the job's store: every rank whose flight
// recorder is on writes its dump, and the watchers end with the backends.
func TestDumpKeyDumpsEveryRank(t *testing.T) {
	leaktest.Check(t)
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "rank_"))
	port := freePort(t)
	jobs, _ := joinAll(t, port, 2, 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bs, errs := onRanks([]int{0, 1}, func(r int) (*nccl.Backend, error) {
		return jobs[r].NewNCCL(ctx, nccl.WithFlightRecorder(8))
	})
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer closeAll(t, bs)
	for r := range 2 {
		_, err := os.Stat(filepath.Join(dir, "rank_"+strconv.Itoa(r)))
		require.True(t, os.IsNotExist(err), "rank %d dumped before the key was set", r)
	}
	require.NoError(t, jobs[0].Store().Set(ctx, DumpKey+"/1", nil))
	for r := range 2 {
		path := filepath.Join(dir, "rank_"+strconv.Itoa(r))
		require.Eventually(t, func() bool {
			tr, err := flightrec.ReadFile(path)
			return err == nil && tr.Rank == r
		}, time.Minute, 10*time.Millisecond, "rank %d wrote no dump at %s", r, path)
	}
}
