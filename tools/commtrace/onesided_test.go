package main

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// commtrace reads the simulator's dumps of a prefill/decode job in which prefill rank
// 1 never puts its block: it names decode rank 2's WaitSignal and rank 1 as the rank
// that did not send.
func TestCommtraceNamesTheUnsentSignal(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("NCCLGO_FR_DUMP_FILE", dir+"/nccl_trace_rank_")
	c, err := commtest.NewCluster(3, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithFlightRecorder(64), nccl.WithTimeout(300*time.Millisecond)))
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := range 3 {
		wg.Go(func() {
			b, err := c.NCCL(r)
			if err != nil {
				errs[r] = err
				return
			}
			mem, err := b.SymmetricAlloc(8192)
			if err != nil {
				errs[r] = err
				return
			}
			inbox, err := b.RegisterWindow(ctx, mem, 4096)
			if err == nil {
				_, err = b.RegisterWindow(ctx, mem+4096, 4096)
			}
			if err != nil {
				errs[r] = err
				return
			}
			switch r {
			case 0: // prefill rank 0 puts its block
				if err = b.PutSignal(mem+4096, 1024, 2, inbox, 0, nccl.Signal{}, 0); err == nil {
					err = b.Communicator().Sync(ctx)
				}
			case 1: // prefill rank 1 never does
			case 2:
				if err = b.WaitSignal([]nccl.SignalWait{{Peer: 0, Count: 1}, {Peer: 1, Count: 1}}, 0); err == nil {
					err = b.Communicator().Sync(ctx)
				}
			}
			errs[r] = err
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], comm.ErrTimeout)
	for _, r := range []int{0, 1} {
		b, err := c.NCCL(r)
		require.NoError(t, err)
		_, err = b.FlightRecorder().WriteFile()
		require.NoError(t, err)
	}
	var out, errOut bytes.Buffer
	code := run([]string{dir}, &out, &errOut)
	t.Log(out.String())
	assert.Equal(t, 1, code, "a problem found: %s", errOut.String())
	assert.Contains(t, out.String(), "unmatched ranks [1]", out.String())
	assert.Contains(t, out.String(), "wait_signal 2<-1", out.String())
}
