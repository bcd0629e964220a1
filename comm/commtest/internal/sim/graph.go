package sim

import (
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Stream capture and CUDA graphs, as the CUDA driver has them in
// CU_STREAM_CAPTURE_MODE_GLOBAL (the mode PyTorch and vLLM capture in):
//
//   - cuStreamBeginCapture puts a stream in capture: work submitted to it from then on
//     is recorded, not run. A stream that waits for an event recorded in the capture
//     joins it (fork); the origin stream waiting for an event recorded on a joined
//     stream is the join.
//   - While a capture is active, the calls that would wait for or query captured work
//     (cuStreamSynchronize, cuStreamQuery of a capturing stream, cuEventQuery of an event
//     recorded in the capture) and cuMemAlloc on the device fail with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture; a capturing
//     stream waiting for an event recorded outside the capture fails with
//     CUDA_ERROR_STREAM_CAPTURE_ISOLATION.
//   - cuStreamEndCapture on the origin stream ends the capture of every joined stream
//     and yields the graph (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if it was
//     invalidated, CUDA_ERROR_STREAM_CAPTURE_UNJOINED if a forked stream has work that
//     no event waited for by the capture follows); cuGraphInstantiate makes it
//     launchable.
//   - Each cuGraphLaunch submits the recorded work again, in the order it was captured,
//     on the launch stream. NCCL operations are submitted anew: every launch is a new
//     collective (and new messages) of its communicators, so replay k of every rank
//     meets replay k of the others, with the buffers' contents of that moment.
//
// The graph is kept as the captured order (a valid order of CUDA's dependency graph):
// the captured branches run one after the other, not concurrently.

// capture is one active stream capture. Guarded by World.mu.
type capture struct {
	origin  *stream
	streams []*stream // the origin and the streams that joined
	nodes   []node
	invalid string // why the capture was invalidated; "" while valid

	work     map[*stream]int  // nodes recorded per stream
	unjoined map[*stream]bool // joined streams with work the origin does not wait for
}

func newCapture(origin *stream) *capture {
	return &capture{origin: origin, streams: []*stream{origin}, work: map[*stream]int{}, unjoined: map[*stream]bool{}}
}

// recordLocked records a stream op submitted to s. Caller holds World.mu.
func (c *capture) recordLocked(s *stream, n node) {
	c.nodes = append(c.nodes, n)
	c.work[s]++
	if s != c.origin {
		c.unjoined[s] = true
	}
}

// waitLocked notes that stream s of the capture waits for ev, recorded in it: the
// stream ev was recorded on is joined if it has recorded nothing since. Caller holds
// World.mu.
func (c *capture) waitLocked(s *stream, ev *event) {
	if ev.from != s && c.work[ev.from] == ev.work {
		delete(c.unjoined, ev.from)
	}
}

// node is one recorded submission: a stream op, run again as is, or NCCL tasks,
// submitted again (new collective slots and messages) at each launch.
type node struct {
	name  string
	run   func() error
	tasks []*task
}

// graph is a captured (or instantiated) graph of device dev. Guarded by World.mu.
type graph struct {
	dev   *device
	nodes []node
	exec  bool // instantiated: launchable
}

// capturedOp is what enqueueLocked returns for recorded work: nothing waits for it.
var capturedOp = func() *op { o := &op{name: "captured", done: make(chan struct{})}; close(o.done); return o }()

// invalidateLocked invalidates the capture c with the reason. Caller holds World.mu.
func (c *capture) invalidateLocked(why string) {
	if c != nil && c.invalid == "" {
		c.invalid = why
	}
}

// capturingLocked reports whether any stream of device d is capturing (global mode:
// then the device refuses unsafe calls from every thread). Caller holds World.mu.
func (w *World) capturingLocked(d *device) *capture {
	if d.def.cap != nil {
		return d.def.cap
	}
	for _, s := range w.streams {
		if s.dev == d && s.cap != nil {
			return s.cap
		}
	}
	return nil
}

// captureTasksLocked records tasks whose streams are capturing and reports whether it
// did; tasks on capturing and non-capturing streams at once are refused, as NCCL does.
// Caller holds World.mu.
func (w *World) captureTasksLocked(tasks []*task, call string) (bool, error) {
	var c *capture
	plain := 0
	for _, t := range tasks {
		switch {
		case t.s.cap == nil:
			plain++
		case c == nil:
			c = t.s.cap
		case c != t.s.cap:
			return true, ncclErr(gpulib.InvalidUsage, call, "operations of one group on streams of different captures")
		}
	}
	switch {
	case c == nil:
		return false, nil
	case plain > 0:
		return true, ncclErr(gpulib.InvalidUsage, call, "operations of one group on capturing and non-capturing streams")
	}
	for _, t := range tasks {
		c.work[t.s]++
		if t.s != c.origin {
			c.unjoined[t.s] = true
		}
	}
	c.nodes = append(c.nodes, node{name: call, tasks: tasks})
	return true, nil
}

// refuseInCaptureLocked fails an unsafe call (a wait, a query, an allocation) while
// capture c is active, and invalidates it. Caller holds World.mu.
func refuseInCaptureLocked(c *capture, call, what string) error {
	c.invalidateLocked(call + " " + what)
	return cudaErr(ErrorStreamCaptureUnsupported, call, "%s during stream capture (the capture is invalidated)", what)
}

// refuseAllocInCapture fails an allocation while a stream of the device captures.
func (d *Driver) refuseAllocInCapture(call string) error {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	if c := d.w.capturingLocked(d.dev); c != nil {
		return refuseInCaptureLocked(c, call, "allocation")
	}
	return nil
}

// StreamIsCapturing is cuStreamIsCapturing: true from cuStreamBeginCapture (or joining a
// capture) until cuStreamEndCapture, also once the capture was invalidated.
func (d *Driver) StreamIsCapturing(s gpulib.Stream) (bool, error) {
	const call = "cuStreamIsCapturing"
	if err := d.enter(call); err != nil {
		return false, err
	}
	w := d.w
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d.dev, s)
	if err != nil {
		return false, cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	return st.cap != nil, nil
}

// BeginCapture is cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL) on device dev.
func (w *World) BeginCapture(dev int, s gpulib.Stream) error {
	const call = "cuStreamBeginCapture_v2"
	d, err := w.device(dev, call)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s == 0 {
		return cudaErr(ErrorStreamCaptureUnsupported, call, "the legacy default stream cannot be captured")
	}
	st, err := w.streamLocked(d, s)
	switch {
	case err != nil:
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	case st.cap != nil:
		return cudaErr(ErrorIllegalState, call, "stream %#x is already capturing", uintptr(s))
	}
	st.cap = newCapture(st)
	return nil
}

// EndCapture is cuStreamEndCapture on device dev: it ends the capture begun on s (and
// of the streams that joined it) and returns the graph.
func (w *World) EndCapture(dev int, s gpulib.Stream) (gpulib.Handle, error) {
	const call = "cuStreamEndCapture"
	d, err := w.device(dev, call)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d, s)
	switch {
	case err != nil:
		return 0, cudaErr(ErrorInvalidHandle, call, "%v", err)
	case st.cap == nil:
		return 0, cudaErr(ErrorIllegalState, call, "stream %#x is not capturing", uintptr(s))
	case st.cap.origin != st:
		return 0, cudaErr(ErrorStreamCaptureUnmatched, call, "stream %#x joined a capture begun on stream %#x: end it there", uintptr(s), uintptr(st.cap.origin.h))
	}
	c := st.cap
	for _, j := range c.streams {
		j.cap = nil
	}
	for _, e := range w.events {
		if e.cap == c {
			e.cap = nil
		}
	}
	if c.invalid != "" {
		return 0, cudaErr(ErrorStreamCaptureInvalidated, call, "the capture was invalidated by %s", c.invalid)
	}
	for _, j := range c.streams {
		if c.unjoined[j] {
			return 0, cudaErr(ErrorStreamCaptureUnjoined, call, "stream %#x forked from the capture has work the origin stream %#x never waits for", uintptr(j.h), uintptr(s))
		}
	}
	h := gpulib.Handle(w.handle())
	w.graphsLocked()[h] = &graph{dev: d, nodes: c.nodes}
	return h, nil
}

func (w *World) graphsLocked() map[gpulib.Handle]*graph {
	if w.graphs == nil {
		w.graphs = map[gpulib.Handle]*graph{}
	}
	return w.graphs
}

func (w *World) graphLocked(d *device, g gpulib.Handle, call string) (*graph, error) {
	gr, ok := w.graphsLocked()[g]
	switch {
	case !ok:
		return nil, cudaErr(ErrorInvalidHandle, call, "graph %#x does not exist (never made or destroyed)", uintptr(g))
	case gr.dev != d:
		return nil, cudaErr(ErrorInvalidHandle, call, "graph %#x belongs to device %d, not device %d", uintptr(g), gr.dev.idx, d.idx)
	}
	return gr, nil
}

// Instantiate is cuGraphInstantiate of a graph from EndCapture: it returns the
// executable graph.
func (w *World) Instantiate(dev int, g gpulib.Handle) (gpulib.Handle, error) {
	const call = "cuGraphInstantiateWithFlags"
	d, err := w.device(dev, call)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	gr, err := w.graphLocked(d, g, call)
	if err != nil {
		return 0, err
	}
	if gr.exec {
		return 0, cudaErr(ErrorInvalidValue, call, "%#x is an executable graph already", uintptr(g))
	}
	h := gpulib.Handle(w.handle())
	w.graphs[h] = &graph{dev: d, nodes: gr.nodes, exec: true}
	return h, nil
}

// DestroyGraph is cuGraphDestroy or cuGraphExecDestroy; launched work still runs.
func (w *World) DestroyGraph(dev int, g gpulib.Handle) error {
	const call = "cuGraphDestroy"
	d, err := w.device(dev, call)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.graphLocked(d, g, call); err != nil {
		return err
	}
	delete(w.graphs, g)
	return nil
}

// Launch is cuGraphLaunch of an executable graph on stream s of device dev: it submits
// the recorded work again on s. NCCL operations become new operations of their
// communicators (which must still be usable).
func (w *World) Launch(dev int, g gpulib.Handle, s gpulib.Stream) error {
	const call = "cuGraphLaunch"
	d, err := w.device(dev, call)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	gr, err := w.graphLocked(d, g, call)
	if err != nil {
		return err
	}
	if !gr.exec {
		return cudaErr(ErrorInvalidValue, call, "graph %#x is not instantiated", uintptr(g))
	}
	st, err := w.streamLocked(d, s)
	if err != nil {
		return cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	if d.sticky != nil || d.dead || w.closed {
		return cudaErr(ErrorLaunchFailed, call, "device %d cannot run work", d.idx)
	}
	for _, n := range gr.nodes {
		if n.tasks == nil {
			w.enqueueLocked(st, n.name, n.run)
			continue
		}
		tasks := make([]*task, len(n.tasks))
		for i, t := range n.tasks {
			if err := t.rc.readyLocked(n.name); err != nil {
				return cudaErr(ErrorLaunchFailed, call, "captured %s: %v", n.name, err)
			}
			c := *t
			c.s = st
			tasks[i] = &c
		}
		if err := w.submitLocked(tasks, n.name); err != nil && code(err) != gpulib.InProgress {
			return cudaErr(ErrorLaunchFailed, call, "captured %s: %v", n.name, err)
		}
	}
	return nil
}

// code is the NCCL result of err (Success if it is none).
func code(err error) gpulib.Result {
	if e, ok := err.(*gpulib.Error); ok {
		return e.Code
	}
	return gpulib.Success
}

// IsCapturing is cuStreamIsCapturing on device dev, outside any driver's counts.
func (w *World) IsCapturing(dev int, s gpulib.Stream) (bool, error) {
	const call = "cuStreamIsCapturing"
	d, err := w.device(dev, call)
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	st, err := w.streamLocked(d, s)
	if err != nil {
		return false, cudaErr(ErrorInvalidHandle, call, "%v", err)
	}
	return st.cap != nil, nil
}
