package nccl

import (
	"context"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// StreamComm is the typed API of a Communicator on one CUDA stream: every
// operation is enqueued on that stream instead of the communicator's own (as pynccl and
// cudarc take a stream per call), so communication is ordered with the caller's
// compute on the device, without events and without the host waiting. Get one with
// Communicator.OnStream; it is a small value, free to make per call.
//
// Ordering: on each stream, operations run in the order they were enqueued, after the
// work queued on that stream before them. Several streams per communicator may be in
// flight at once; every rank must issue a communicator's operations in the same order,
// whichever stream each uses, and since NCCL may serialise one communicator's work
// across streams, an operation must not depend on one issued later on another stream.
// StreamComm.Sync waits for the view's stream only;
// Communicator.Sync waits for the communicator's own stream only: a caller that
// mixes streams syncs each (or its own stream). Group scope, PreMulSum operators,
// health and Close are the communicator's: StreamComm.Close closes the communicator.
type StreamComm struct {
	c *Communicator
	s gpulib.Stream
}

var _ comm.Communicator = StreamComm{}

// OnStream returns the typed API on stream s, a stream of this rank's device (0, the
// legacy default stream, is refused: it belongs to whichever context is current on
// the calling thread).
func (c *Communicator) OnStream(s comm.Stream) (StreamComm, error) {
	if err := c.g.Open("on-stream"); err != nil {
		return StreamComm{}, err
	}
	if s == 0 {
		return StreamComm{}, &comm.ArgError{Rank: c.rank, HasRank: true, Op: "on-stream", Arg: "stream", Value: s, Err: comm.ErrUnsupported,
			Reason: "the legacy default stream: create a stream of the rank's device"}
	}
	return StreamComm{c: c, s: gpulib.Stream(s)}, nil
}

// on is the typed API on the communication stream.
func (c *Communicator) on() StreamComm { return StreamComm{c: c, s: c.stream} }

// Stream is the stream the view enqueues on.
func (v StreamComm) Stream() comm.Stream { return comm.Stream(v.s) }

// Communicator is the communicator the view enqueues on.
func (v StreamComm) Communicator() *Communicator { return v.c }

// Rank is this rank's index, from 0.
func (v StreamComm) Rank() int { return v.c.rank }

// WorldSize is the number of ranks.
func (v StreamComm) WorldSize() int { return v.c.world }

// Sync waits until the work enqueued on the view's stream so far has completed, within
// ctx and the operation timeout, checking the communicator for errors while it waits.
func (v StreamComm) Sync(ctx context.Context) error {
	c := v.c
	if err := c.g.OutsideGroup(core.OpSync); err != nil {
		return err
	}
	if err := c.refuseCapture(core.OpSync, -1, v.s); err != nil {
		return err
	}
	c.life.RLock()
	defer c.life.RUnlock()
	if err := c.usable(core.OpSync, -1); err != nil {
		return err
	}
	if err := c.drainOn(ctx, v.s, bounded); err != nil {
		return &comm.OpError{Op: core.OpSync, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return nil
}

// Barrier all-reduces one int32 on the view's stream and waits for it.
func (v StreamComm) Barrier(ctx context.Context) error {
	c := v.c
	if err := c.g.Open(core.OpBarrier); err != nil {
		return err
	}
	if err := c.refuseCapture(core.OpBarrier, -1, v.s); err != nil {
		return err
	}
	err := c.enqueue(core.OpBarrier, -1, ungroupable, func(ncclOps) error {
		return c.d.AllReduce(c.scratch, c.scratch, 1, gpulib.Int32, gpulib.Sum, c.comm, v.s)
	})
	if err != nil {
		return err
	}
	return v.Sync(ctx)
}

// Split is the communicator's Split: the children enqueue on their own streams.
func (v StreamComm) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	return v.c.Split(ctx, color, key)
}

// GroupStart is the communicator's GroupStart (group scope is per OS thread, not per
// stream).
func (v StreamComm) GroupStart() error { return v.c.GroupStart() }

// GroupEnd is the communicator's GroupEnd.
func (v StreamComm) GroupEnd() error { return v.c.GroupEnd() }

// Close closes the communicator.
func (v StreamComm) Close() error { return v.c.Close() }

// AllReduce enqueues an in-place ncclAllReduce of count elements at ptr.
func (v StreamComm) AllReduce(ptr comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	c := v.c
	bytes, err := c.g.TypedReduce(ptr, count, t, op)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllReduce, count, t, -1, op)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllReduce, bytes, queued, func(to ncclOps) error {
		p := c.buf(ptr)
		return to.AllReduce(p, p, uint64(count), gpulib.DataType(t), gpulib.RedOp(op), c.comm, v.s)
	})
}

// Broadcast enqueues an in-place ncclBroadcast of count elements at ptr from root.
func (v StreamComm) Broadcast(ptr comm.DevicePtr, count int, t comm.DType, root int) error {
	c := v.c
	bytes, err := c.g.TypedBroadcast(ptr, count, t, root)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpBroadcast, count, t, root, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpBroadcast, bytes, queued, func(to ncclOps) error {
		p := c.buf(ptr)
		return to.Broadcast(p, p, uint64(count), gpulib.DataType(t), root, c.comm, v.s)
	})
}

// AllGather enqueues an ncclAllGather of count elements per rank.
func (v StreamComm) AllGather(send, recv comm.DevicePtr, count int, t comm.DType) error {
	c := v.c
	bytes, err := c.g.TypedGather(core.OpAllGather, send, recv, count, t, comm.Sum, false)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllGather, count, t, -1, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllGather, bytes, queued, func(to ncclOps) error {
		return to.AllGather(c.buf(send), c.buf(recv), uint64(count), gpulib.DataType(t), c.comm, v.s)
	})
}

// ReduceScatter enqueues an ncclReduceScatter leaving count elements per rank.
func (v StreamComm) ReduceScatter(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	c := v.c
	bytes, err := c.g.TypedGather(core.OpReduceScatter, send, recv, count, t, op, true)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpReduceScatter, count, t, -1, op)); err != nil {
		return err
	}
	return c.enqueue(core.OpReduceScatter, bytes, queued, func(to ncclOps) error {
		return to.ReduceScatter(c.buf(send), c.buf(recv), uint64(count), gpulib.DataType(t), gpulib.RedOp(op), c.comm, v.s)
	})
}

// Send enqueues an ncclSend of count elements to dest on the stream. The
// tag is ignored. A two-way exchange needs GroupStart/GroupEnd around both directions.
func (v StreamComm) Send(ptr comm.DevicePtr, count int, t comm.DType, dest int, _ uint32) error {
	c := v.c
	bytes, err := c.g.TypedP2P(core.OpSend, "dest", ptr, count, t, dest)
	if err != nil {
		return err
	}
	return c.p2p(core.OpSend, ptr, bytes, uint64(count), gpulib.DataType(t), dest, v.s, true)
}

// Recv enqueues an ncclRecv of count elements from src on the stream.
// The tag is ignored.
func (v StreamComm) Recv(ptr comm.DevicePtr, count int, t comm.DType, src int, _ uint32) error {
	c := v.c
	bytes, err := c.g.TypedP2P(core.OpRecv, "src", ptr, count, t, src)
	if err != nil {
		return err
	}
	return c.p2p(core.OpRecv, ptr, bytes, uint64(count), gpulib.DataType(t), src, v.s, false)
}
