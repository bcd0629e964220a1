package sim

import (
	"fmt"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// op is one unit of work queued on a stream. run may block (a collective waits for its
// peers); it must return once its device's stop channel closes.
type op struct {
	name string
	run  func() error
	done chan struct{} // closed when run has returned
}

// stream runs its ops in order, one at a time, on a goroutine that exists while the
// queue is not empty. All fields are guarded by World.mu.
type stream struct {
	h         gpulib.Stream
	dev       *device
	queue     []*op
	running   bool
	tail      *op // the op enqueued last; nil if none yet
	destroyed bool
	cap       *capture // the stream capture it is part of (graph.go); nil if none
}

// event captures the tail of a stream when recorded. Guarded by World.mu.
type event struct {
	h      gpulib.Event
	dev    *device
	target *op      // nil: never recorded, or recorded on an empty stream (complete)
	cap    *capture // recorded in this active capture (graph.go); target is then nil
	from   *stream  // with cap: the stream it was recorded on, after its work[from] nodes
	work   int
}

func isDone(o *op) bool {
	if o == nil {
		return true
	}
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// enqueueLocked appends an op to s and starts its goroutine if needed. On a halted
// device the op stays queued and never runs. Caller holds w.mu.
func (w *World) enqueueLocked(s *stream, name string, run func() error) *op {
	if s.cap != nil { // recorded into the graph, not run (graph.go)
		s.cap.recordLocked(s, node{name: name, run: run})
		return capturedOp
	}
	o := &op{name: name, run: run, done: make(chan struct{})}
	s.queue = append(s.queue, o)
	s.tail = o
	if !s.running && !s.dev.halted {
		s.running = true
		life := s.dev.streams
		life.Add(1)
		w.goLocked(func() {
			defer life.Done()
			w.drain(s)
		})
	}
	return o
}

// drain executes s's queue until it is empty or the device stops.
func (w *World) drain(s *stream) {
	for {
		w.mu.Lock()
		if len(s.queue) == 0 || s.dev.halted {
			s.running = false
			w.mu.Unlock()
			return
		}
		o := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		w.mu.Unlock()

		if err := o.run(); err != nil {
			w.fault(s.dev, err)
		}
		close(o.done)
	}
}

// fault records an error of device code: like a CUDA context after an illegal access,
// the device fails every later CUDA call, and its communicators report
// ncclUnhandledCudaError.
func (w *World) fault(d *device, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.sticky == nil {
		d.sticky = err
	}
	for _, rc := range w.comms {
		if rc.dev == d && rc.asyncErr == gpulib.Success {
			rc.asyncErr = gpulib.UnhandledCudaError
		}
	}
}

// streamLocked resolves a stream handle of device d. Caller holds w.mu.
func (w *World) streamLocked(d *device, h gpulib.Stream) (*stream, error) {
	if h == 0 {
		return d.def, nil
	}
	s, ok := w.streams[h]
	if !ok {
		return nil, fmt.Errorf("stream %#x does not exist (never created or destroyed)", uintptr(h))
	}
	if s.dev != d {
		return nil, fmt.Errorf("stream %#x belongs to device %d, not device %d", uintptr(h), s.dev.idx, d.idx)
	}
	return s, nil
}

func (w *World) eventLocked(d *device, h gpulib.Event) (*event, error) {
	e, ok := w.events[h]
	if !ok {
		return nil, fmt.Errorf("event %#x does not exist (never created or destroyed)", uintptr(h))
	}
	if e.dev != d {
		return nil, fmt.Errorf("event %#x belongs to device %d, not device %d", uintptr(h), e.dev.idx, d.idx)
	}
	return e, nil
}

// waitOp blocks until o is done or stop closes; it reports whether o completed.
func waitOp(o *op, stop <-chan struct{}) bool {
	if o == nil {
		return true
	}
	select {
	case <-o.done:
		return true
	case <-stop:
		return isDone(o)
	}
}

// Synchronize waits until every stream of device dev has run all the work queued so far
// (cuCtxSynchronize), or until the device stops. It returns the device's sticky error,
// if any.
func (w *World) Synchronize(dev int) error {
	if dev < 0 || dev >= len(w.devices) {
		return fmt.Errorf("synchronize: device %d out of range [0, %d)", dev, len(w.devices))
	}
	d := w.devices[dev]
	w.mu.Lock()
	tails := []*op{d.def.tail}
	for _, s := range w.streams {
		if s.dev == d {
			tails = append(tails, s.tail)
		}
	}
	stop := d.stop
	w.mu.Unlock()
	for _, t := range tails {
		if !waitOp(t, stop) {
			return fmt.Errorf("synchronize device %d: device stopped with work pending", dev)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return d.sticky
}
