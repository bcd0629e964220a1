package commtest

import (
	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// Stream capture into CUDA graphs, for testing an engine's captured step. The
// simulator captures as CUDA does in CU_STREAM_CAPTURE_MODE_GLOBAL: from BeginCapture
// to EndCapture, work submitted to the stream (and to streams that wait for an event
// recorded in the capture) is recorded instead of run; waiting for or querying that
// work, or allocating device memory, fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// and invalidates the capture. Each Graph.Launch submits the recorded work again: every
// NCCL operation in it is a new operation of its communicator, so launch k of every
// rank meets launch k of the others, on the buffers' contents of that moment. Like the
// other device helpers these are not library calls of the backend and are not counted
// by DriverCalls (engines make them through raw/cuda).

// Graph is an executable graph of one rank's device (cuStreamEndCapture followed by
// cuGraphInstantiate).
type Graph struct {
	c    *Cluster
	rank int
	h    gpulib.Handle
}

// BeginCapture starts capturing stream s of rank's device (cuStreamBeginCapture,
// global mode). s must be a stream from NewStream: the legacy default stream cannot be
// captured.
func (c *Cluster) BeginCapture(rank int, s comm.Stream) error {
	if err := c.checkRank("begin capture", rank); err != nil {
		return err
	}
	return c.w.BeginCapture(rank, gpulib.Stream(s))
}

// EndCapture ends the capture begun on stream s of rank's device and instantiates the
// graph (cuStreamEndCapture + cuGraphInstantiate). A capture invalidated by an unsafe
// call fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
func (c *Cluster) EndCapture(rank int, s comm.Stream) (*Graph, error) {
	if err := c.checkRank("end capture", rank); err != nil {
		return nil, err
	}
	g, err := c.w.EndCapture(rank, gpulib.Stream(s))
	if err != nil {
		return nil, err
	}
	exec, err := c.w.Instantiate(rank, g)
	if derr := c.w.DestroyGraph(rank, g); err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	return &Graph{c: c, rank: rank, h: exec}, nil
}

// IsCapturing reports whether stream s of rank's device is capturing
// (cuStreamIsCapturing).
func (c *Cluster) IsCapturing(rank int, s comm.Stream) (bool, error) {
	if err := c.checkRank("is capturing", rank); err != nil {
		return false, err
	}
	return c.w.IsCapturing(rank, gpulib.Stream(s))
}

// Rank is the rank whose device the graph belongs to.
func (g *Graph) Rank() int { return g.rank }

// Launch submits the graph's work on stream s of its device (cuGraphLaunch) and
// returns without waiting: SyncStream waits for it.
func (g *Graph) Launch(s comm.Stream) error {
	return g.c.w.Launch(g.rank, g.h, gpulib.Stream(s))
}

// Destroy releases the graph (cuGraphExecDestroy); launched work still runs.
func (g *Graph) Destroy() error { return g.c.w.DestroyGraph(g.rank, g.h) }
