package comm

import "github.com/ncclgo/ncclgo/comm/internal/core"

// AllReduceInto validates its arguments and does nothing (one rank: recv is not written).
func (n *NoOp) AllReduceInto(send, recv DevicePtr, count int, t DType, op ReduceOp) error {
	_, err := n.guard().TypedInto(core.OpAllReduceInto, send, recv, count, t, op, 0, false)
	return err
}

// BroadcastInto validates its arguments and does nothing.
func (n *NoOp) BroadcastInto(send, recv DevicePtr, count int, t DType, root int) error {
	_, err := n.guard().TypedBroadcastInto(send, recv, count, t, root)
	return err
}

// Reduce validates its arguments and does nothing.
func (n *NoOp) Reduce(send, recv DevicePtr, count int, t DType, op ReduceOp, root int) error {
	_, err := n.guard().TypedInto(core.OpReduce, send, recv, count, t, op, root, true)
	return err
}

// AllToAll validates its arguments and does nothing.
func (n *NoOp) AllToAll(send, recv DevicePtr, count int, t DType) error {
	_, err := n.guard().TypedAllToAll(send, recv, count, t)
	return err
}

// AllToAllv validates its arguments and does nothing.
func (n *NoOp) AllToAllv(send DevicePtr, sendCounts, sendDispls []int, recv DevicePtr, recvCounts, recvDispls []int, t DType) error {
	_, err := n.guard().TypedAllToAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t)
	return err
}

// Gather validates its arguments and does nothing.
func (n *NoOp) Gather(send, recv DevicePtr, count int, t DType, root int) error {
	_, err := n.guard().TypedRooted(core.OpGather, send, recv, count, t, root, false)
	return err
}

// Scatter validates its arguments and does nothing.
func (n *NoOp) Scatter(send, recv DevicePtr, count int, t DType, root int) error {
	_, err := n.guard().TypedRooted(core.OpScatter, send, recv, count, t, root, true)
	return err
}
