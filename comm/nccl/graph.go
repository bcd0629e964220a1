package nccl

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// CUDA graphs. An engine captures its step (cuStreamBeginCapture on a stream of its
// own, the step's kernels and communication, cuStreamEndCapture) and replays it with
// cuGraphLaunch, as vLLM and PyTorch do. What only enqueues is capturable: the typed
// operations on a caller's stream (OnStream) or on the communication stream,
// AllReduceAsync on a capturing compute stream (the communication stream joins the
// capture through the backend's events), grouped send/recv, WaitForStream and
// MakeStreamWait. None of them waits on the host, allocates or queries a stream or an
// event of the capture. What waits for its work (Sync, Barrier, the Backend's blocking
// collectives, RecvCommandU32) fails with ErrCapturing on a capturing stream, before
// anything is enqueued, and leaves the capture valid.

// ErrCapturing: an operation that waits for its work was called on a stream that is
// capturing into a CUDA graph (cuStreamIsCapturing), where the work is recorded, not
// run.
var ErrCapturing = errors.New("stream is capturing into a CUDA graph")

// IsCapturing reports whether stream s of this rank's device is capturing into a CUDA
// graph (cuStreamIsCapturing; an invalidated capture still counts). Stream 0 is the
// legacy default stream, of the rank's device.
func (c *Communicator) IsCapturing(s comm.Stream) (bool, error) {
	if c.d == nil {
		return false, core.NotMade("is-capturing")
	}
	if s == 0 { // the legacy default stream is the current context's: make it the rank's
		if err := bind(c.d); err != nil {
			return false, &comm.OpError{Op: "is-capturing", Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
		}
		defer runtime.UnlockOSThread()
	}
	capturing, err := c.d.StreamIsCapturing(gpulib.Stream(s))
	if err != nil {
		return false, &comm.OpError{Op: "is-capturing", Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: fmt.Errorf("cuStreamIsCapturing: %w", err)}
	}
	return capturing, nil
}

// refuseCapture fails op, which waits for its work on stream s, while s is capturing.
// After Close it says nothing: the operation reports ErrClosed.
func (c *Communicator) refuseCapture(op string, bytes int, s gpulib.Stream) error {
	if c.g.IsClosed() {
		return nil
	}
	capturing, err := c.d.StreamIsCapturing(s)
	if err == nil && !capturing {
		return nil
	}
	return c.captureErr(op, bytes, s, capturing, err)
}

// captureErr is refuseCapture's error: the query failed, or s is capturing.
func (c *Communicator) captureErr(op string, bytes int, s gpulib.Stream, capturing bool, err error) error {
	switch {
	case err != nil:
		return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: fmt.Errorf("cuStreamIsCapturing: %w", err)}
	case capturing:
		return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name,
			Err: fmt.Errorf("%w: stream %#x: %s waits for its work; use the enqueue-only operations in a graph", ErrCapturing, uintptr(s), op)}
	}
	return nil
}

// capturing reports whether s is capturing, false if the query fails (the caller then
// takes its ordinary path, whose own calls report the failure).
func (c *Communicator) capturing(s gpulib.Stream) bool {
	capturing, err := c.d.StreamIsCapturing(s)
	return err == nil && capturing
}
