package flightrec_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// The timeout of the hung ranks' operations: the hang ends in it, and the operations
// before the hang complete well within it.
const hangTimeout = 3 * time.Second

// simJob is a job of n ranks of the NCCL backend on the simulator (commtest), whose
// flight recorders dump into dir.
type simJob struct {
	t   testing.TB
	c   *commtest.Cluster
	b   []*nccl.Backend
	buf []comm.DevicePtr
}

func newSimJob(t testing.TB, dir string, n int) *simJob {
	t.Helper()
	t.Setenv("NCCLGO_FR_DUMP_FILE", filepath.Join(dir, "nccl_trace_rank_"))
	t.Setenv("NCCLGO_FR_BUFFER_SIZE", "64") // the recorder is off by default
	c, err := commtest.NewCluster(n, commtest.WithCommOptions(nccl.WithElementType(comm.Float32), nccl.WithTimeout(hangTimeout)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	j := &simJob{t: t, c: c}
	for r := range n {
		b, err := c.NCCL(r)
		require.NoError(t, err)
		require.NotNil(t, b.FlightRecorder(), "NCCLGO_FR_BUFFER_SIZE did not turn the flight recorder on")
		p, err := c.Alloc(r, 8192)
		require.NoError(t, err)
		j.b, j.buf = append(j.b, b), append(j.buf, p)
	}
	return j
}

// each runs f on every rank listed (all when none), concurrently, and returns their
// errors by rank.
func (j *simJob) each(f func(r int, b *nccl.Backend) error, ranks ...int) []error {
	if len(ranks) == 0 {
		for r := range j.b {
			ranks = append(ranks, r)
		}
	}
	errs := make([]error, len(j.b))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { errs[r] = f(r, j.b[r]) })
	}
	wg.Wait()
	return errs
}

// steps runs k all-reduces of 1024 floats on every rank, all of which succeed.
func (j *simJob) steps(k int) {
	for range k {
		for r, err := range j.each(func(r int, b *nccl.Backend) error { return b.AllReduce(j.buf[r], 4096) }) {
			require.NoError(j.t, err, "rank %d", r)
		}
	}
}

// dumpOnDemand writes the dumps of ranks that did not fail (an operator's signal).
func (j *simJob) dumpOnDemand(ranks ...int) {
	for _, r := range ranks {
		_, err := j.b[r].FlightRecorder().WriteFile()
		require.NoError(j.t, err)
	}
}

// Hangs produced by the NCCL backend itself on the simulator: the failing ranks dump
// on their timeout or error, the others on demand; commtrace's verdict (Analyze) and
// torch 2.14's fr_trace must name the same rank and operation.
var backendHangs = []flightrec.Hang{
	flightrec.NewHang("a rank skips a collective", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 4)
		j.steps(2)
		errs := j.each(func(r int, b *nccl.Backend) error { return b.AllReduce(j.buf[r], 4096) }, 0, 1, 2)
		for r := range 3 {
			require.ErrorIs(t, errs[r], comm.ErrTimeout, "rank %d", r)
		}
		j.dumpOnDemand(3)
	}, flightrec.Missing, "0", []int{0, 1, 2, 3}, 3, "all_reduce"),

	flightrec.NewHang("a rank calls with another count", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 4)
		j.steps(2)
		errs := j.each(func(r int, b *nccl.Backend) error {
			if r == 2 {
				return b.AllReduce(j.buf[r], 2048)
			}
			return b.AllReduce(j.buf[r], 4096)
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
		}
	}, flightrec.Mismatch, "0", []int{0, 1, 2, 3}, 2, "all_reduce"),

	flightrec.NewHang("a rank dies", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 4)
		j.steps(2)
		require.NoError(t, j.c.Kill(3))
		errs := j.each(func(r int, b *nccl.Backend) error { return b.AllReduce(j.buf[r], 4096) }, 0, 1, 2)
		for r := range 3 {
			require.Error(t, errs[r], "rank %d", r)
		}
	}, flightrec.NoDump, "0", []int{0, 1, 2, 3}, 3, "all_reduce"),

	flightrec.NewHang("a mismatch inside a split communicator", func(t testing.TB, dir string) {
		j, gather := splitJob(t, dir)
		// Rank 5 gathers another size in the odd child; the even child goes on.
		errs := j.each(func(r int, _ *nccl.Backend) error {
			if r == 5 {
				return gather(r, 512)
			}
			return gather(r, 256)
		})
		for r, err := range errs {
			if r%2 == 1 {
				require.Error(t, err, "rank %d", r)
			} else {
				require.NoError(t, err, "rank %d", r)
			}
		}
		j.dumpOnDemand(0, 2, 4, 6)
	}, flightrec.Mismatch, "0:split1:1", []int{1, 3, 5, 7}, 5, "all_gather"),

	flightrec.NewHang("a rank skips a collective inside a split communicator", func(t testing.TB, dir string) {
		j, gather := splitJob(t, dir)
		// Rank 3 never gathers in the odd child; the even child goes on.
		errs := j.each(func(r int, _ *nccl.Backend) error { return gather(r, 256) }, 0, 1, 2, 4, 5, 6, 7)
		for r, err := range errs {
			switch {
			case r == 3:
			case r%2 == 1:
				require.ErrorIs(t, err, comm.ErrTimeout, "rank %d", r)
			default:
				require.NoError(t, err, "rank %d", r)
			}
		}
		j.dumpOnDemand(0, 2, 3, 4, 6)
	}, flightrec.Missing, "0:split1:1", []int{1, 3, 5, 7}, 3, "all_gather"),

	flightrec.NewHang("a send without its receive", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 2)
		j.steps(2)
		c := j.b[0].Communicator()
		require.NoError(t, c.Send(j.buf[0], 16, comm.Float32, 1, 0))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.ErrorIs(t, c.Sync(ctx), comm.ErrTimeout)
		j.dumpOnDemand(1)
	}, flightrec.Unmatched, "0", []int{0, 1}, 1, "send"),

	flightrec.NewHang("a grouped send and receive without their peer", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 2)
		j.steps(2)
		c := j.b[0].Communicator()
		require.NoError(t, c.GroupStart())
		require.NoError(t, c.Send(j.buf[0], 16, comm.Float32, 1, 0))
		require.NoError(t, c.Recv(j.buf[0]+4096, 16, comm.Float32, 1, 0))
		require.NoError(t, c.GroupEnd())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		require.ErrorIs(t, c.Sync(ctx), comm.ErrTimeout)
		j.dumpOnDemand(1)
	}, flightrec.Unmatched, "0", []int{0, 1}, 1, "send"),

	flightrec.NewHang("a group of collectives where a rank's count differs", func(t testing.TB, dir string) {
		j := newSimJob(t, dir, 4)
		j.steps(2)
		errs := j.each(func(r int, b *nccl.Backend) error {
			n := 4096
			if r == 2 {
				n = 2048
			}
			return comm.InGroup(b, func() error {
				if err := b.AllGather(j.buf[r], j.buf[r]+4096, 512); err != nil {
					return err
				}
				return b.AllReduce(j.buf[r], n)
			})
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
		}
	}, flightrec.Mismatch, "0", []int{0, 1, 2, 3}, 2, "all_reduce"),
}

// splitJob is a job of 8 ranks split by parity into two children of 4 ranks
// ("0:split1:0" and "0:split1:1") that each gathered once; gather(r, bytes) makes rank
// r's child gather bytes from each member.
func splitJob(t testing.TB, dir string) (*simJob, func(r, bytes int) error) {
	j := newSimJob(t, dir, 8)
	j.steps(1)
	kids := make([]*nccl.Backend, 8)
	for r, err := range j.each(func(r int, b *nccl.Backend) (err error) {
		kids[r], err = b.Split(context.Background(), r%2, r)
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
		t.Cleanup(func() { _ = kids[r].Close() })
	}
	gather := func(r, bytes int) error { return kids[r].AllGather(j.buf[r], j.buf[r]+4096, bytes) }
	for r, err := range j.each(func(r int, _ *nccl.Backend) error { return gather(r, 256) }) {
		require.NoError(t, err, "rank %d", r)
	}
	return j, gather
}

func TestBackendHangsBothAnalyzersAgree(t *testing.T) {
	for _, h := range backendHangs {
		t.Run(flightrec.HangName(h), func(t *testing.T) { flightrec.AgreeOnHang(t, h) })
	}
}
