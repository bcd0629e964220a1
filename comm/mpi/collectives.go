package mpi

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// The MPI Communicator's out-of-place, rooted and all-to-all collectives: blocking MPI
// calls on host memory that have completed when they return, with the validation,
// element types and reduce operations of AllReduce (Avg pre-multiplied for floating
// types, summed and divided for integers).

// scratch returns c.tmp grown to at least bytes (at least one byte, so that its first
// element has an address). The caller holds c.mu.
func (c *Communicator) scratch(bytes int) unsafe.Pointer {
	if cap(c.tmp) < max(bytes, 1) {
		c.tmp = make([]byte, max(bytes, 1))
	}
	return unsafe.Pointer(&c.tmp[:1][0])
}

// addr is the host address a DevicePtr carries, as the MPI calls take it (call).
func addr(p comm.DevicePtr) uintptr { return uintptr(p) }

// AllReduceInto reduces count elements at send across ranks with op into recv
// (MPI_Allreduce out of place; send == recv is the in-place AllReduce). It has
// completed when it returns.
func (c *Communicator) AllReduceInto(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	bytes, err := c.g.TypedInto(core.OpAllReduceInto, send, recv, count, t, op, 0, false)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpAllReduceInto, "count", count); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpAllReduceInto, count, t, -1, op, false); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	in := addr(send)
	mop := op
	switch {
	case op == comm.Avg:
		// recv gets the pre-multiplied contributions (a copy for integers), reduced in place.
		c.premultiply(hostPtr(recv), hostPtr(send), count, t)
		in, mop = mpi.InPlace, comm.Sum
	case send == recv:
		in = mpi.InPlace
	}
	err = c.allreduce(in, addr(recv), count, c.p.types[t], c.p.ops[t][mop])
	if err == nil && op == comm.Avg {
		c.divide(hostPtr(recv), count, t)
	}
	return c.opErr(core.OpAllReduceInto, bytes, err)
}

// BroadcastInto copies count elements at send on root to recv on every rank (MPI_Bcast
// of recv, into which root first copies send; send == recv is the in-place Broadcast).
// It has completed when it returns.
func (c *Communicator) BroadcastInto(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	bytes, err := c.g.TypedBroadcastInto(send, recv, count, t, root)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpBroadcastInto, "bytes", bytes); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpBroadcastInto, count, t, root, 0, true); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	if c.rank == root && send != recv && bytes > 0 {
		copy(unsafe.Slice((*byte)(hostPtr(recv)), bytes), unsafe.Slice((*byte)(hostPtr(send)), bytes))
	}
	return c.opErr(core.OpBroadcastInto, bytes, c.bcast(addr(recv), bytes, root))
}

// Reduce reduces count elements at send across ranks with op into recv on root
// (MPI_Reduce; recv is used on root only, and send == recv on root is the in-place
// form). It has completed when it returns.
func (c *Communicator) Reduce(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp, root int) error {
	bytes, err := c.g.TypedInto(core.OpReduce, send, recv, count, t, op, root, true)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpReduce, "count", count); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpReduce, count, t, root, op, false); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	in, out := addr(send), addr(recv)
	isRoot := c.rank == root
	if !isRoot {
		out = 0
	}
	mop := op
	switch {
	case op == comm.Avg && isRoot:
		c.premultiply(hostPtr(recv), hostPtr(send), count, t)
		in, mop = mpi.InPlace, comm.Sum
	case op == comm.Avg:
		tmp := c.scratch(bytes)
		c.premultiply(tmp, hostPtr(send), count, t)
		in, mop = uintptr(tmp), comm.Sum
	case isRoot && send == recv:
		in = mpi.InPlace
	}
	err = c.call(callReduce, in, out, uintptr(count), uintptr(c.p.types[t]), uintptr(c.p.ops[t][mop]), uintptr(root), uintptr(c.comm))
	if err == nil && op == comm.Avg && isRoot {
		c.divide(hostPtr(recv), count, t)
	}
	return c.opErr(core.OpReduce, bytes, err)
}

// Gather collects count elements at send from every rank into recv on root, in rank
// order (MPI_Gather of bytes; on root, send == recv + root*count elements is the
// in-place form). It has completed when it returns.
func (c *Communicator) Gather(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	bytes, err := c.g.TypedRooted(core.OpGather, send, recv, count, t, root, false)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpGather, "bytes", bytes*c.world); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpGather, count, t, root, 0, true); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	in, out := addr(send), addr(recv)
	if c.rank != root {
		out = 0
	} else if send == recv+comm.DevicePtr(root*bytes) {
		in = mpi.InPlace
	}
	return c.opErr(core.OpGather, bytes, c.byteCall(callGather, in, bytes, out, root))
}

// Scatter sends block i of root's send (count elements at send + i*count) to rank i's
// recv (MPI_Scatter of bytes; on root, recv == send + root*count elements is the
// in-place form). It has completed when it returns.
func (c *Communicator) Scatter(send, recv comm.DevicePtr, count int, t comm.DType, root int) error {
	bytes, err := c.g.TypedRooted(core.OpScatter, send, recv, count, t, root, true)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpScatter, "bytes", bytes*c.world); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpScatter, count, t, root, 0, true); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	in, out := addr(send), addr(recv)
	if c.rank != root {
		in = 0
	} else if recv == send+comm.DevicePtr(root*bytes) {
		out = mpi.InPlace
	}
	return c.opErr(core.OpScatter, bytes, c.byteCall(callScatter, in, bytes, out, root))
}

// AllToAll sends block j (count elements at send + j*count) to rank j and receives
// rank i's block at recv + i*count (MPI_Alltoall of bytes). It has completed when it
// returns.
func (c *Communicator) AllToAll(send, recv comm.DevicePtr, count int, t comm.DType) error {
	bytes, err := c.g.TypedAllToAll(send, recv, count, t)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpAllToAll, "bytes", bytes*c.world); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpAllToAll, count, t, -1, 0, true); err != nil {
		return err
	}
	defer c.unlockBlocking(bytes)
	return c.opErr(core.OpAllToAll, bytes*c.world, c.byteCall(callAlltoall, addr(send), bytes, addr(recv), -1))
}

// AllToAllv is AllToAll with per-peer counts and displacements in elements
// (MPI_Alltoallv of bytes: every displacement plus its count must fit MPI's int in
// bytes). It has completed when it returns.
func (c *Communicator) AllToAllv(send comm.DevicePtr, sendCounts, sendDispls []int, recv comm.DevicePtr, recvCounts, recvDispls []int, t comm.DType) error {
	bytes, err := c.g.TypedAllToAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t)
	if err != nil {
		return err
	}
	es := t.Size()
	sc, sd, err := mpiByteCounts("send", sendCounts, sendDispls, es)
	if err != nil {
		return err
	}
	rc, rd, err := mpiByteCounts("recv", recvCounts, recvDispls, es)
	if err != nil {
		return err
	}
	if err := c.lockChecked(core.OpAllToAllv, 0, t, -1, 0, true); err != nil {
		return err
	}
	defer c.unlockBlocking(mpiAlwaysTimed)
	u8 := c.p.types[comm.Uint8]
	err = c.call(callAlltoallv, addr(send), uintptr(unsafe.Pointer(&sc[0])), uintptr(unsafe.Pointer(&sd[0])), uintptr(u8),
		addr(recv), uintptr(unsafe.Pointer(&rc[0])), uintptr(unsafe.Pointer(&rd[0])), uintptr(u8), uintptr(c.comm))
	runtime.KeepAlive(sc)
	runtime.KeepAlive(sd)
	runtime.KeepAlive(rc)
	runtime.KeepAlive(rd)
	return c.opErr(core.OpAllToAllv, bytes, err)
}

// allreduce is MPI_Allreduce on c (call: on the progress thread under contention,
// progress.go); in may be mpi.InPlace.
func (c *Communicator) allreduce(in, out uintptr, count int, t mpi.Datatype, op mpi.Op) error {
	return c.call(callAllreduce, in, out, uintptr(count), uintptr(t), uintptr(op), uintptr(c.comm))
}

// reduceScatterBlock is MPI_Reduce_scatter_block on c, as allreduce.
func (c *Communicator) reduceScatterBlock(in, out uintptr, count int, t mpi.Datatype, op mpi.Op) error {
	return c.call(callReduceScatterBlock, in, out, uintptr(count), uintptr(t), uintptr(op), uintptr(c.comm))
}

// bcast is MPI_Bcast of bytes on c, as allreduce.
func (c *Communicator) bcast(buf uintptr, bytes, root int) error {
	return c.call(callBcast, buf, uintptr(bytes), uintptr(c.p.types[comm.Uint8]), uintptr(root), uintptr(c.comm))
}

// byteCall is MPI_Allgather, MPI_Alltoall (root -1), MPI_Gather or MPI_Scatter of bytes
// per rank on c, as allreduce.
func (c *Communicator) byteCall(kind int, in uintptr, bytes int, out uintptr, root int) error {
	u8 := uintptr(c.p.types[comm.Uint8])
	if kind == callGather || kind == callScatter {
		return c.call(kind, in, uintptr(bytes), u8, out, uintptr(bytes), u8, uintptr(root), uintptr(c.comm))
	}
	return c.call(kind, in, uintptr(bytes), u8, out, uintptr(bytes), u8, uintptr(c.comm))
}

// mpiByteCounts converts one side of AllToAllv (validated: one entry per rank, none
// negative) to MPI's int byte counts and displacements.
func mpiByteCounts(side string, counts, displs []int, es int) (cs, ds []int32, err error) {
	cs, ds = make([]int32, len(counts)), make([]int32, len(counts))
	for i := range counts {
		if err := checkMPICount(core.OpAllToAllv, fmt.Sprintf("%s displacement[%d] + count[%d] in bytes", side, i, i), (displs[i]+counts[i])*es); err != nil {
			return nil, nil, err
		}
		cs[i], ds[i] = int32(counts[i]*es), int32(displs[i]*es)
	}
	return cs, ds, nil
}

// PreMulSum fails with ErrUnsupported: pre-multiplied sums are NCCL's reduction
// operators (ncclRedOpCreatePreMulSum), which MPI has no counterpart of. Avg is the
// pre-multiplied sum by 1/WorldSize() that every communicator has.
func (c *Communicator) PreMulSum(t comm.DType, _ float64) (comm.ReduceOp, error) {
	if _, err := c.g.Typed(core.OpPreMulSum, 0, t); err != nil {
		return 0, err
	}
	return 0, errMPIPreMulSum()
}

// PreMulSumDevice fails with ErrUnsupported, as PreMulSum.
func (c *Communicator) PreMulSumDevice(t comm.DType, _ comm.DevicePtr) (comm.ReduceOp, error) {
	if _, err := c.g.Typed(core.OpPreMulSum, 0, t); err != nil {
		return 0, err
	}
	return 0, errMPIPreMulSum()
}

// DestroyReduceOp fails with ErrUnsupported: the MPI Communicator makes no operators.
func (c *Communicator) DestroyReduceOp(comm.ReduceOp) error {
	if err := c.g.Open(core.OpPreMulSum); err != nil {
		return err
	}
	return errMPIPreMulSum()
}

func errMPIPreMulSum() error {
	return &comm.ArgError{Op: core.OpPreMulSum, Arg: "communicator", Value: "mpi", Err: comm.ErrUnsupported,
		Reason: "pre-mul-sum operators are NCCL's (ncclRedOpCreatePreMulSum); MPI has none"}
}
