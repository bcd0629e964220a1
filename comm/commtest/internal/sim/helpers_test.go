package sim

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// newWorld returns a world closed (and checked for leftover goroutines) at cleanup.
func newWorld(t *testing.T, devices int, opts ...Option) *World {
	t.Helper()
	before := runtime.NumGoroutine()
	w, err := New(devices, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, w.Close())
		if !t.Failed() {
			requireGoroutines(t, before)
		}
	})
	return w
}

// requireGoroutines waits for the goroutine count to come back to at most n.
func requireGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: the machine may be loaded
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > n {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines left, want at most %d:\n%s", got, n, buf[:runtime.Stack(buf, true)])
	}
}

// rig is an n-rank communicator with one stream per rank.
type rig struct {
	w *World
	d []*Driver
	c []gpulib.Comm
	s []gpulib.Stream
}

func newRig(t *testing.T, n int, opts ...Option) *rig {
	t.Helper()
	w := newWorld(t, n, opts...)
	r := &rig{w: w, d: make([]*Driver, n), c: make([]gpulib.Comm, n), s: make([]gpulib.Stream, n)}
	for i := range n {
		d, err := w.Driver(i)
		require.NoError(t, err)
		r.d[i] = d
		r.s[i], err = d.StreamCreate()
		require.NoError(t, err)
	}
	id, err := r.d[0].GetUniqueID()
	require.NoError(t, err)
	r.each(t, func(i int) error {
		c, err := r.d[i].CommInitRank(n, id, i, gpulib.Config{Blocking: true})
		r.c[i] = c
		return err
	})
	return r
}

// each runs f for every rank concurrently and requires every call to succeed within
// ten seconds.
func (r *rig) each(t *testing.T, f func(rank int) error) {
	t.Helper()
	errs := r.try(t, f)
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
}

// try runs f for every rank concurrently and returns the errors.
func (r *rig) try(t *testing.T, f func(rank int) error) []error {
	t.Helper()
	errs := make([]error, len(r.d))
	within(t, 10*time.Second, func() {
		var wg sync.WaitGroup
		for i := range r.d {
			wg.Go(func() { errs[i] = f(i) })
		}
		wg.Wait()
	})
	return errs
}

// sync waits for every rank's stream.
func (r *rig) sync(t *testing.T) {
	t.Helper()
	r.each(t, func(i int) error { return r.d[i].StreamSynchronize(r.s[i]) })
}

// alloc allocates bytes on every rank, filled by fill(rank).
func (r *rig) alloc(t *testing.T, bytes uint64, fill func(rank int) []byte) []gpulib.Ptr {
	t.Helper()
	ps := make([]gpulib.Ptr, len(r.d))
	for i := range r.d {
		p, err := r.w.Alloc(i, bytes)
		require.NoError(t, err)
		if fill != nil {
			require.NoError(t, r.w.Write(i, p, fill(i)))
		}
		ps[i] = p
	}
	return ps
}

func (r *rig) read(t *testing.T, rank int, p gpulib.Ptr, n uint64) []byte {
	t.Helper()
	b, err := r.w.Read(rank, p, n)
	require.NoError(t, err)
	return b
}

// within runs f and fails the test if it takes longer than d.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		buf := make([]byte, 1<<16)
		t.Fatalf("did not finish within %v:\n%s", d, buf[:runtime.Stack(buf, true)])
	}
}

// never reports whether cond stays false for d (polled).
func never(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return !cond()
}

// eventually reports whether cond becomes true within d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

func ncclCode(err error) gpulib.Result {
	var se *gpulib.Error
	if errors.As(err, &se) {
		return se.Code
	}
	return gpulib.Success
}

func cudaCode(err error) CUDAResult {
	var ce *CUDAError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return 0
}

// gate registers a kernel "gate" that blocks its stream until the returned function is
// called (or the device stops).
func gate(t *testing.T, w *World, dev int) (gpulib.Function, func()) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	stop := w.devices[dev].stop
	name := "gate-" + t.Name()
	require.NoError(t, w.RegisterKernel(name, Kernel{Run: func(Memory, []uint64) error {
		select {
		case <-ch:
		case <-stop:
		}
		return nil
	}}))
	f, err := w.LoadKernel(dev, name)
	require.NoError(t, err)
	open := func() { once.Do(func() { close(ch) }) }
	t.Cleanup(open)
	return f, open
}
