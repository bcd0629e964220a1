package comm

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/stretchr/testify/require"
)

// exclusiveDriver records two ways the locks of the operations' success path could
// fail: a driver call made under the driver lock while another runs (NCCL calls on one
// communicator from two threads at once), and any operation call once the communicator
// has ended (an operation that Close did not wait for).
type exclusiveDriver struct {
	stubDriver
	inside  atomic.Int32
	ended   atomic.Bool
	overlap atomic.Int32
	late    atomic.Int32
}

// locked is a call made under the driver lock; it yields while inside so that another
// goroutine gets the chance to overlap it.
func (d *exclusiveDriver) locked() {
	runtime.Gosched()
	if d.inside.Add(1) > 1 {
		d.overlap.Add(1)
	}
	d.unlocked()
	runtime.Gosched()
	d.inside.Add(-1)
}

// unlocked is an operation's call made without the driver lock (its capture check
// and its wait's stream query; Close itself polls ncclCommGetAsyncError after
// ncclCommFinalize, so that query is not counted).
func (d *exclusiveDriver) unlocked() {
	if d.ended.Load() {
		d.late.Add(1)
	}
}

func (d *exclusiveDriver) AllReduce(_, _ gpulib.Ptr, _ uint64, _ gpulib.DataType, _ gpulib.RedOp, _ gpulib.Comm, _ gpulib.Stream) error {
	d.locked()
	return nil
}
func (d *exclusiveDriver) EventRecord(gpulib.Event, gpulib.Stream) error     { d.locked(); return nil }
func (d *exclusiveDriver) StreamWaitEvent(gpulib.Stream, gpulib.Event) error { d.locked(); return nil }
func (d *exclusiveDriver) StreamIsCapturing(gpulib.Stream) (bool, error) {
	d.unlocked()
	return false, nil
}
func (d *exclusiveDriver) StreamQuery(gpulib.Stream) (bool, error) { d.unlocked(); return true, nil }
func (d *exclusiveDriver) CommFinalize(gpulib.Comm) error          { d.ended.Store(true); return nil }
func (d *exclusiveDriver) CommAbort(gpulib.Comm) error             { d.ended.Store(true); return nil }

// TestCloseWaitsForConcurrentReductions hammers AllReduce and AllReduceAsync from
// several goroutines and closes the backend while they run, a number of times: every
// call either succeeds or fails with ErrClosed, no driver call under the driver lock
// overlaps another, and none comes after the communicator ended.
func TestCloseWaitsForConcurrentReductions(t *testing.T) {
	const rounds, workers, warm = 20, 4, 50
	for range rounds {
		d := &exclusiveDriver{}
		b := newStubNCCL(t, d)
		var started, done sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			started.Add(1)
			done.Add(1)
			go func() {
				defer done.Done()
				for i := 0; ; i++ {
					var err error
					if (i+w)%2 == 0 {
						err = b.AllReduce(p, 4096)
					} else {
						err = b.AllReduceAsync(p, 4096, 3)
					}
					if i == warm || (err != nil && i < warm) {
						started.Done()
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		started.Wait() // every worker is past its first calls and still calling
		require.NoError(t, b.Close())
		done.Wait()
		close(errs)
		for err := range errs {
			require.Truef(t, errors.Is(err, ErrClosed), "a call racing Close failed with %v, want ErrClosed", err)
		}
		require.Zero(t, d.overlap.Load(), "driver calls under the driver lock overlapped")
		require.Zero(t, d.late.Load(), "operation calls after the communicator ended")
	}
}

// TestConcurrentReductionsTakeTheDriverInTurn runs AllReduce and AllReduceAsync from
// several goroutines at once: all succeed and no two driver calls under the driver
// lock overlap.
func TestConcurrentReductionsTakeTheDriverInTurn(t *testing.T) {
	const workers, calls = 4, 500
	d := &exclusiveDriver{}
	b := newStubNCCL(t, d)
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if (i+w)%2 == 0 {
					errs <- b.AllReduce(p, 4096)
				} else {
					errs <- b.AllReduceAsync(p, 4096, 3)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, d.overlap.Load(), "driver calls under the driver lock overlapped")
}
