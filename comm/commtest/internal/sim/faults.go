package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// This file holds what tests use besides the driver: fault injection, host access to
// device memory, and counters for leak checks. None of it counts as a driver call.

func (w *World) device(dev int, what string) (*device, error) {
	if dev < 0 || dev >= len(w.devices) {
		return nil, fmt.Errorf("%s: device %d out of range [0, %d)", what, dev, len(w.devices))
	}
	return w.devices[dev], nil
}

// Kill makes device dev die: work queued on it never runs (its peers' collectives never
// complete), every call through its driver fails, and calls blocked on it return. When
// Kill returns, the operation each of its streams was running has returned and nothing
// of the device runs any more.
func (w *World) Kill(dev int) error {
	d, err := w.device(dev, "kill")
	if err != nil {
		return err
	}
	w.mu.Lock()
	d.dead = true
	d.halt()
	life := d.streams
	w.mu.Unlock()
	life.Wait()
	return nil
}

// Revive brings a dead device back as a restarted process finds it: empty. Its memory,
// streams, events, loaded kernels and communicators are gone (their handles and
// addresses stay invalid), injected faults are cleared, and its driver works again.
// Revive first waits, as Kill does, for the old streams' goroutines: work queued before
// Kill is dropped and never runs on the revived device, and faults it raised while
// dying are cleared with the rest.
func (w *World) Revive(dev int) error {
	d, err := w.device(dev, "revive")
	if err != nil {
		return err
	}
	w.mu.Lock()
	err = w.reviveCheckLocked(d)
	life := d.streams
	w.mu.Unlock()
	if err != nil {
		return err
	}
	life.Wait() // the device is halted: no stream goroutine of it starts any more
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.reviveCheckLocked(d); err != nil { // a concurrent Revive or Close won
		return err
	}
	for h, s := range w.streams {
		if s.dev == d {
			delete(w.streams, h)
		}
	}
	for h, e := range w.events {
		if e.dev == d {
			delete(w.events, h)
		}
	}
	for h, f := range w.funcs {
		if f.dev == d {
			delete(w.funcs, h)
		}
	}
	for h, rc := range w.comms {
		if rc.dev == d {
			rc.stopLocked()
			delete(w.comms, h)
		}
	}
	if d.streams != life { // a concurrent Revive won (and a Kill may have followed)
		return fmt.Errorf("revive device %d: revived concurrently", d.idx)
	}
	d.wipe()
	d.def = &stream{h: 0, dev: d}
	d.streams = new(sync.WaitGroup)
	d.stop = make(chan struct{})
	d.halted, d.dead, d.sticky, d.hang, d.delay = false, false, nil, 0, 0
	drv := w.drivers[dev]
	drv.mu.Lock()
	drv.fails = map[string][]error{}
	drv.mu.Unlock()
	return nil
}

func (w *World) reviveCheckLocked(d *device) error {
	switch {
	case w.closed:
		return fmt.Errorf("revive device %d: world closed", d.idx)
	case !d.dead:
		return fmt.Errorf("revive device %d: the device is alive", d.idx)
	}
	return nil
}

// InjectError makes every communicator of device dev report code from
// ncclCommGetAsyncError (and fail new calls with it), as NCCL does after a transport
// failure (gpulib.RemoteError, gpulib.SystemError). Operations already queued stay queued.
func (w *World) InjectError(dev int, code gpulib.Result) error {
	d, err := w.device(dev, "inject error")
	if err != nil {
		return err
	}
	if code == gpulib.Success || code == gpulib.InProgress {
		return fmt.Errorf("inject error: %v is not an error", code)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rc := range w.comms {
		if rc.dev == d {
			rc.asyncErr = code
		}
	}
	return nil
}

// Hang makes the next ops NCCL operations that start on device dev never complete: they
// (and the peers' matching operations) wait until the communicator is aborted, revoked
// or destroyed, or the world closes.
func (w *World) Hang(dev, ops int) error {
	d, err := w.device(dev, "hang")
	if err != nil {
		return err
	}
	if ops < 0 {
		return fmt.Errorf("hang: ops %d: must not be negative", ops)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d.hang = ops
	return nil
}

// Delay makes every NCCL operation on device dev wait delay before it starts (a slow
// rank); 0 removes the delay.
func (w *World) Delay(dev int, delay time.Duration) error {
	d, err := w.device(dev, "delay")
	if err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("delay: %v: must not be negative", delay)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d.delay = delay
	return nil
}

// FailCall makes the next times calls of the C function call (one of CallNames) on
// device dev return err without doing anything. A nil err gives an error wrapping
// ErrInjected (a *gpulib.Error with ncclSystemError for NCCL functions).
func (w *World) FailCall(dev int, call string, err error, times int) error {
	if _, e := w.device(dev, "fail call"); e != nil {
		return e
	}
	return w.drivers[dev].failCall(call, err, times)
}

// Alloc allocates zeroed device memory on dev without going through the driver.
func (w *World) Alloc(dev int, bytes uint64) (gpulib.Ptr, error) {
	d, err := w.device(dev, "alloc")
	if err != nil {
		return 0, err
	}
	if bytes == 0 {
		return 0, fmt.Errorf("alloc on device %d: size 0", dev)
	}
	p, err := d.alloc(bytes, false)
	if err != nil {
		return 0, fmt.Errorf("alloc on device %d: %w", dev, err)
	}
	return p, nil
}

// Free frees memory from Alloc (or cuMemAlloc).
func (w *World) Free(dev int, p gpulib.Ptr) error {
	d, err := w.device(dev, "free")
	if err != nil {
		return err
	}
	if err := d.free(p, false); err != nil {
		return fmt.Errorf("free on device %d: %w", dev, err)
	}
	return nil
}

// Read copies n bytes at p on device dev to the host, immediately: like a copy on a
// stream that does not wait for others, it sees whatever the streams have done so far.
func (w *World) Read(dev int, p gpulib.Ptr, n uint64) ([]byte, error) {
	d, err := w.device(dev, "read")
	if err != nil {
		return nil, err
	}
	b, err := d.read(p, n)
	if err != nil {
		return nil, fmt.Errorf("read %d bytes on device %d: %w", n, dev, err)
	}
	return b, nil
}

// Write copies data to p on device dev, immediately.
func (w *World) Write(dev int, p gpulib.Ptr, data []byte) error {
	d, err := w.device(dev, "write")
	if err != nil {
		return err
	}
	if err := d.write(p, data); err != nil {
		return fmt.Errorf("write %d bytes on device %d: %w", len(data), dev, err)
	}
	return nil
}

// Usage describes what a device holds, for leak checks.
type Usage struct {
	Bytes         uint64 // device memory in use
	Allocations   int    // live cuMemAlloc allocations
	NCCLAllocs    int    // live ncclMemAlloc allocations
	Streams       int    // streams created and not destroyed
	Events        int    // events created and not destroyed
	Comms         int    // communicators neither destroyed nor aborted
	Registrations int    // ncclCommRegister handles not deregistered, on live communicators
	Windows       int    // windows not deregistered, on live communicators
}

// Usage returns what device dev holds now.
func (w *World) Usage(dev int) (Usage, error) {
	d, err := w.device(dev, "usage")
	if err != nil {
		return Usage{}, err
	}
	var u Usage
	u.Bytes, u.Allocations, u.NCCLAllocs = d.usage()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.streams {
		if s.dev == d {
			u.Streams++
		}
	}
	for _, e := range w.events {
		if e.dev == d {
			u.Events++
		}
	}
	for _, rc := range w.comms {
		if rc.dev == d {
			u.Comms++
			u.Registrations += len(rc.regs)
			u.Windows += len(rc.wins)
		}
	}
	return u, nil
}

// NewStream creates a stream on device dev (not counted as a driver call).
func (w *World) NewStream(dev int) (gpulib.Stream, error) {
	if _, err := w.device(dev, "new stream"); err != nil {
		return 0, err
	}
	return w.drivers[dev].streamCreate(), nil
}

// DestroyStream destroys a stream of device dev.
func (w *World) DestroyStream(dev int, s gpulib.Stream) error {
	if _, err := w.device(dev, "destroy stream"); err != nil {
		return err
	}
	return w.drivers[dev].streamDestroy("destroy stream", s)
}

// CopyAsync queues a device-to-device copy on stream s of device dev.
func (w *World) CopyAsync(dev int, dst, src gpulib.Ptr, bytes uint64, s gpulib.Stream) error {
	if _, err := w.device(dev, "copy"); err != nil {
		return err
	}
	return w.drivers[dev].memcpy("copy", dst, src, bytes, s)
}

// SyncStream waits for the work queued on stream s of device dev.
func (w *World) SyncStream(dev int, s gpulib.Stream) error {
	if _, err := w.device(dev, "sync stream"); err != nil {
		return err
	}
	return w.drivers[dev].streamSync("sync stream", s)
}

// Hold queues on stream s of device dev an operation that blocks the stream until
// release is called (or the world closes). release is idempotent.
func (w *World) Hold(dev int, s gpulib.Stream) (release func(), err error) {
	d, err := w.device(dev, "hold")
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	var once sync.Once
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d, s)
	if err != nil {
		return nil, fmt.Errorf("hold: %w", err)
	}
	stop := d.stop
	w.enqueueLocked(st, "hold", func() error {
		select {
		case <-ch:
		case <-stop:
		}
		return nil
	})
	return func() { once.Do(func() { close(ch) }) }, nil
}

// NewUniqueID returns a new unique id for ncclCommInitRank, as ncclGetUniqueId would,
// without counting a driver call.
func (w *World) NewUniqueID() gpulib.UniqueID { return w.getUniqueID() }

// TotalCalls returns the number of driver calls made on every device.
func (w *World) TotalCalls() int64 {
	var n int64
	for _, d := range w.drivers {
		n += d.TotalCalls()
	}
	return n
}
