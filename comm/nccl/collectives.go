package nccl

import (
	"runtime"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// versionAlltoAll is the first NCCL with ncclAlltoAll, ncclGather and ncclScatter
// (2.28.3). With an older library the typed API builds them from ncclSend/ncclRecv in
// one group, as NCCL's own tests and PyTorch do.
const versionAlltoAll = 22803

// nativeAlltoAll reports whether the loaded NCCL has ncclAlltoAll, ncclGather and
// ncclScatter.
func (c *Communicator) nativeAlltoAll() bool { return c.version >= versionAlltoAll }

// AllReduceInto enqueues an out-of-place ncclAllReduce of count elements from send
// into recv.
func (v StreamComm) AllReduceInto(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	c := v.c
	bytes, err := c.g.TypedInto(core.OpAllReduceInto, send, recv, count, t, op, 0, false)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllReduceInto, count, t, -1, op)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllReduceInto, bytes, queued, func(to ncclOps) error {
		return to.AllReduce(c.buf(send), c.buf(recv), uint64(count), gpulib.DataType(t), gpulib.RedOp(op), c.comm, v.s)
	})
}

// BroadcastInto enqueues an out-of-place ncclBroadcast of count elements from send on
// root into recv.
func (v StreamComm) BroadcastInto(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	c := v.c
	bytes, err := c.g.TypedBroadcastInto(send, recv, count, t, root)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpBroadcastInto, count, t, root, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpBroadcastInto, bytes, queued, func(to ncclOps) error {
		return to.Broadcast(c.buf(send), c.buf(recv), uint64(count), gpulib.DataType(t), root, c.comm, v.s)
	})
}

// Reduce enqueues an ncclReduce of count elements into recv on root.
func (v StreamComm) Reduce(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp, root int) error {
	c := v.c
	bytes, err := c.g.TypedInto(core.OpReduce, send, recv, count, t, op, root, true)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpReduce, count, t, root, op)); err != nil {
		return err
	}
	return c.enqueue(core.OpReduce, bytes, queued, func(to ncclOps) error {
		return to.Reduce(c.buf(send), c.buf(recv), uint64(count), gpulib.DataType(t), gpulib.RedOp(op), root, c.comm, v.s)
	})
}

// AllToAll enqueues an all-to-all of count elements per peer: ncclAlltoAll on NCCL >=
// 2.28.3, else one group of ncclSend/ncclRecv per peer (this rank's own block is a
// device copy).
func (v StreamComm) AllToAll(send, recv comm.DevicePtr, count int, t comm.DType) error {
	c := v.c
	bytes, err := c.g.TypedAllToAll(send, recv, count, t)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllToAll, count, t, -1, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllToAll, bytes*c.world, queued, func(to ncclOps) error {
		dt, n := gpulib.DataType(t), uint64(count)
		if c.nativeAlltoAll() {
			return to.AlltoAll(c.buf(send), c.buf(recv), n, dt, c.comm, v.s)
		}
		if count == 0 {
			return nil
		}
		return c.p2pGroup(to, func() error {
			for p := range c.world {
				at := comm.DevicePtr(p * bytes)
				if err := v.exchange(to, p, send+at, n, recv+at, n, dt, bytes); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// AllToAllv enqueues one group of ncclSend/ncclRecv, one pair per peer with a non-zero
// count (this rank's own block is a device copy).
func (v StreamComm) AllToAllv(send comm.DevicePtr, sendCounts, sendDispls []int, recv comm.DevicePtr, recvCounts, recvDispls []int, t comm.DType) error {
	c := v.c
	bytes, err := c.g.TypedAllToAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpAllToAllv, 0, t, -1, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpAllToAllv, bytes, queued, func(to ncclOps) error {
		if bytes == 0 {
			return nil
		}
		es := t.Size()
		return c.p2pGroup(to, func() error {
			for p := range c.world {
				s := send + comm.DevicePtr(sendDispls[p]*es)
				r := recv + comm.DevicePtr(recvDispls[p]*es)
				if err := v.exchange(to, p, s, uint64(sendCounts[p]), r, uint64(recvCounts[p]), gpulib.DataType(t), sendCounts[p]*es); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Gather enqueues ncclGather on NCCL >= 2.28.3, else a group in which every rank sends
// to root and root receives from every rank.
func (v StreamComm) Gather(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	c := v.c
	bytes, err := c.g.TypedRooted(core.OpGather, send, recv, count, t, root, false)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpGather, count, t, root, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpGather, bytes, queued, func(to ncclOps) error {
		dt, n := gpulib.DataType(t), uint64(count)
		if c.nativeAlltoAll() {
			return to.Gather(c.buf(send), c.buf(recv), n, dt, root, c.comm, v.s)
		}
		if count == 0 {
			return nil
		}
		return c.p2pGroup(to, func() error {
			if c.rank != root {
				return pending(to.Send(gpulib.Ptr(send), n, dt, root, c.comm, v.s))
			}
			for p := range c.world {
				if err := v.exchange(to, p, send, 0, recv+comm.DevicePtr(p*bytes), n, dt, bytes); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Scatter enqueues ncclScatter on NCCL >= 2.28.3, else a group in which root sends to
// every rank and every rank receives from root.
func (v StreamComm) Scatter(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	c := v.c
	bytes, err := c.g.TypedRooted(core.OpScatter, send, recv, count, t, root, true)
	if err != nil {
		return err
	}
	if err := c.checkCall(sig(core.OpScatter, count, t, root, -1)); err != nil {
		return err
	}
	return c.enqueue(core.OpScatter, bytes, queued, func(to ncclOps) error {
		dt, n := gpulib.DataType(t), uint64(count)
		if c.nativeAlltoAll() {
			return to.Scatter(c.buf(send), c.buf(recv), n, dt, root, c.comm, v.s)
		}
		if count == 0 {
			return nil
		}
		return c.p2pGroup(to, func() error {
			if c.rank != root {
				return pending(to.Recv(gpulib.Ptr(recv), n, dt, root, c.comm, v.s))
			}
			for p := range c.world {
				if err := v.exchange(to, p, send+comm.DevicePtr(p*bytes), n, recv, 0, dt, bytes); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// exchange posts, inside p2pGroup, this rank's part with peer: sendCount elements at
// send and recvCount elements into recv (zero counts post nothing). With itself it
// copies selfBytes from send to recv on the stream instead, unless they are the same.
// Gather passes a recvCount of 0 for peers' sends (root only receives), Scatter the
// reverse; for this rank both sides are its own block.
func (v StreamComm) exchange(to ncclOps, peer int, send comm.DevicePtr, sendCount uint64, recv comm.DevicePtr, recvCount uint64, dt gpulib.DataType, selfBytes int) error {
	c := v.c
	if peer == c.rank {
		if selfBytes == 0 || send == recv {
			return nil
		}
		return c.locked(to, func() error {
			return c.d.MemcpyDtoDAsync(gpulib.Ptr(recv), gpulib.Ptr(send), uint64(selfBytes), v.s)
		})
	}
	if sendCount > 0 {
		if err := pending(to.Send(gpulib.Ptr(send), sendCount, dt, peer, c.comm, v.s)); err != nil {
			return err
		}
	}
	if recvCount > 0 {
		return pending(to.Recv(gpulib.Ptr(recv), recvCount, dt, peer, c.comm, v.s))
	}
	return nil
}

// p2pGroup runs post between ncclGroupStart and ncclGroupEnd on the calling OS thread
// (NCCL keeps group state per thread); inside a group the caller opened (to records)
// post's calls join that group, as a nested NCCL group's would. The caller holds c.mu
// unless to records.
// A failed call inside the group makes ncclGroupEnd drop the group.
func (c *Communicator) p2pGroup(to ncclOps, post func() error) error {
	if grouped(to) {
		return post()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.GroupStart(); err != nil {
		return err
	}
	perr := post()
	eerr := c.d.GroupEnd()
	if perr != nil {
		return perr
	}
	return eerr
}

// AllReduceInto is StreamComm.AllReduceInto on the communication stream.
func (c *Communicator) AllReduceInto(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	return c.on().AllReduceInto(send, recv, count, t, op)
}

// BroadcastInto is StreamComm.BroadcastInto on the communication stream.
func (c *Communicator) BroadcastInto(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	return c.on().BroadcastInto(send, recv, count, t, root)
}

// Reduce is StreamComm.Reduce on the communication stream.
func (c *Communicator) Reduce(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp, root int) error {
	return c.on().Reduce(send, recv, count, t, op, root)
}

// AllToAll is StreamComm.AllToAll on the communication stream.
func (c *Communicator) AllToAll(send, recv comm.DevicePtr, count int, t comm.DType) error {
	return c.on().AllToAll(send, recv, count, t)
}

// AllToAllv is StreamComm.AllToAllv on the communication stream.
func (c *Communicator) AllToAllv(send comm.DevicePtr, sendCounts, sendDispls []int, recv comm.DevicePtr, recvCounts, recvDispls []int, t comm.DType) error {
	return c.on().AllToAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t)
}

// Gather is StreamComm.Gather on the communication stream.
func (c *Communicator) Gather(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	return c.on().Gather(send, recv, count, t, root)
}

// Scatter is StreamComm.Scatter on the communication stream.
func (c *Communicator) Scatter(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	return c.on().Scatter(send, recv, count, t, root)
}
