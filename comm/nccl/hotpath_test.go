package nccl

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/fakegpu"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
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
			require.Truef(t, errors.Is(err, comm.ErrClosed), "a call racing Close failed with %v, want ErrClosed", err)
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

// inForeignGroup runs f while another goroutine holds a group open (on a backend of
// its own): the calling goroutine has none, but the process does, so AllReduce takes
// its general path through enqueue instead of the one written out for no group open.
func inForeignGroup(t *testing.T, f func()) {
	t.Helper()
	g := newStubNCCL(t, stubDriver{})
	opened, end, ended := make(chan error), make(chan struct{}), make(chan error)
	go func() {
		opened <- g.GroupStart()
		<-end
		ended <- g.GroupEnd()
	}()
	require.NoError(t, <-opened)
	require.NotZero(t, groups.open.Load())
	f()
	close(end)
	require.NoError(t, <-ended)
}

// TestAllReduceWrittenOutMatchesEnqueue runs AllReduce's success path and each of its
// failures twice, on fresh backends scripted alike: with no group open in the process
// (the sequence written out in AllReduce) and with another goroutine's group open
// (enqueue's general path). Both must make the same driver calls and return the same
// error, leaving the backend as healthy or unhealthy as the other.
func TestAllReduceWrittenOutMatchesEnqueue(t *testing.T) {
	fatal := &gpulib.Error{Code: gpulib.RemoteError, Err: errors.New("remote process exited")}
	cases := map[string]func(f *fakegpu.Driver, b *Backend){
		"success": func(*fakegpu.Driver, *Backend) {},
		"capture query fails": func(f *fakegpu.Driver, _ *Backend) {
			f.Fail("StreamIsCapturing", errors.New("CUDA_ERROR_INVALID_HANDLE"))
		},
		"fatal result":     func(f *fakegpu.Driver, _ *Backend) { f.Fail("AllReduce", fatal) },
		"invalid argument": func(f *fakegpu.Driver, _ *Backend) { f.Fail("AllReduce", &gpulib.Error{Code: gpulib.InvalidArgument}) },
		"in progress, settles": func(f *fakegpu.Driver, _ *Backend) {
			f.Fail("AllReduce", &gpulib.Error{Code: gpulib.InProgress})
			f.InitPolls.Store(2)
		},
		"stream query fails": func(f *fakegpu.Driver, _ *Backend) { f.Fail("StreamQuery", errors.New("CUDA_ERROR_LAUNCH_FAILED")) },
		"async error": func(f *fakegpu.Driver, _ *Backend) {
			f.AsyncErr.Store(int32(gpulib.RemoteError))
			f.LastErr = "peer gone"
		},
		"async query fails": func(f *fakegpu.Driver, _ *Backend) { f.Fail("CommGetAsyncError", errors.New("query failed")) },
		"failed before": func(f *fakegpu.Driver, b *Backend) {
			f.Fail("Broadcast", fatal)
			require.Error(t, b.Broadcast(p, 8, 0))
			f.Fail("Broadcast", nil)
		},
	}
	type outcome struct {
		err     string
		healthy bool
		calls   []string
	}
	run := func(script func(*fakegpu.Driver, *Backend), grouped bool) outcome {
		f := fakegpu.New()
		b := newFakeNCCL(t, f, 1, 2, quiet)
		script(f, b)
		f.Log()
		var err error
		if grouped {
			inForeignGroup(t, func() { err = b.AllReduce(p, 4096) })
		} else {
			require.Zero(t, groups.open.Load())
			err = b.AllReduce(p, 4096)
		}
		o := outcome{healthy: !b.c.faulted.Load(), calls: f.Log()}
		if err != nil {
			o.err = err.Error()
		}
		return o
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			direct, general := run(script, false), run(script, true)
			require.Equal(t, general, direct)
		})
	}
}
