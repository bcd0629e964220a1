package commtest_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// TestNoCommandLostAcrossCancellations is a worker loop on RecvCommandU32 whose waits
// often end by deadline: root broadcasts 1,000 numbered commands, one after another;
// every worker retries with a new random deadline (0 to 2 ms; after 50 expired tries in
// a row, a generous one) until a call succeeds, and records what it received. For every
// tenth command the root first waits until every worker's first try has expired, so
// that pending receives certainly occur. Every command must arrive exactly once and in
// order: a receive left pending by an expired call is completed by the next call,
// never repeated and never overtaken.
func TestNoCommandLostAcrossCancellations(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint("world", n), func(t *testing.T) {
			const commands = 1000
			c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16), commtest.WithCommOptions(nccl.WithTimeout(time.Minute), nccl.WithLogger(quietLog)))
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			bs := c.Backends()
			bufs := make([]comm.DevicePtr, n)
			for r := range n {
				bufs[r], err = c.Alloc(r, 4)
				require.NoError(t, err)
			}
			got := make([][]uint32, n)
			errs := make([]error, n)
			expiredFirst := make(chan struct{}, n) // a worker's first try of a tenth command expired
			var wg sync.WaitGroup
			wg.Go(func() { // root
				word := make([]byte, 4)
				for i := range commands {
					if i%10 == 0 {
						for range n - 1 {
							<-expiredFirst
						}
					}
					binary.LittleEndian.PutUint32(word, uint32(i+1))
					if err := c.Write(0, bufs[0], word); err != nil {
						errs[0] = err
						return
					}
					if err := bs[0].Broadcast(bufs[0], 4, 0); err != nil {
						errs[0] = fmt.Errorf("command %d: %w", i+1, err)
						return
					}
				}
			})
			for r := 1; r < n; r++ {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 7))
					for len(got[r]) < commands {
						expired := 0
						for {
							d := time.Duration(rng.IntN(2000)) * time.Microsecond
							switch {
							case len(got[r])%10 == 0 && expired == 0:
								d = 0 // expires: root has not sent the command yet
							case expired >= 50:
								d = time.Minute
							}
							ctx, cancel := context.WithTimeout(context.Background(), d)
							err := bs[r].RecvCommandU32(ctx, bufs[r], 0)
							cancel()
							if err == nil {
								break
							}
							if !errors.Is(err, context.DeadlineExceeded) {
								errs[r] = fmt.Errorf("after %d commands: %w", len(got[r]), err)
								return
							}
							if len(got[r])%10 == 0 && expired == 0 {
								expiredFirst <- struct{}{}
							}
							expired++
						}
						word, err := c.Read(r, bufs[r], 4)
						if err != nil {
							errs[r] = err
							return
						}
						got[r] = append(got[r], binary.LittleEndian.Uint32(word))
						if v := got[r][len(got[r])-1]; v != uint32(len(got[r])) {
							errs[r] = fmt.Errorf("command %d received as number %d: a command was lost or repeated", v, len(got[r]))
							return
						}
					}
				})
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				t.Fatal("the command loop did not finish within 5 minutes (a receive is waiting for a command that was already consumed)")
			}
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := 1; r < n; r++ {
				require.Len(t, got[r], commands, "rank %d", r)
			}
		})
	}
}
