package comm

import (
	"errors"
	"fmt"
	"math"
)

// ErrOverlap: the send and receive buffers of an operation that needs them apart
// (AllToAll, AllToAllv) overlap.
var ErrOverlap = errors.New("overlapping buffers")

// Operation names of the collectives in this file, used in errors.
const (
	opAllReduceInto = "all-reduce-into"
	opBroadcastInto = "broadcast-into"
	opReduce        = "reduce"
	opAllToAll      = "all-to-all"
	opAllToAllv     = "all-to-allv"
	opGather        = "gather"
	opScatter       = "scatter"
)

// span is a buffer argument: count elements at p (0: unused).
type span struct {
	arg   string
	p     DevicePtr
	count int
}

// typedBuffers checks the buffers of a typed operation on elements of t: every used
// buffer non-null and, for reductions, aligned; its size in bytes, without overflow.
func typedBuffers(op string, t DType, reduce bool, spans ...span) error {
	es := t.Size()
	for _, s := range spans {
		if s.count == 0 {
			continue
		}
		if s.count > math.MaxInt/es {
			return &ArgError{Op: op, Arg: s.arg, Value: s.count, Err: ErrInvalidSize,
				Reason: fmt.Sprintf("%d elements of %d bytes (%s) overflow", s.count, es, t)}
		}
		if err := checkPtr(op, s.arg, s.p, s.count*es); err != nil {
			return err
		}
		if reduce {
			if err := checkAlign(op, s.arg, s.p, t); err != nil {
				return err
			}
		}
	}
	return nil
}

// apart fails when count elements at a and at b overlap.
func apart(op string, a, b DevicePtr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	if a < b+DevicePtr(bytes) && b < a+DevicePtr(bytes) {
		return &ArgError{Op: op, Arg: "recv", Value: fmt.Sprintf("%#x", uint64(b)), Err: ErrOverlap,
			Reason: fmt.Sprintf("%d bytes at send %#x and at recv overlap", bytes, uint64(a))}
	}
	return nil
}

// perRank returns count elements per rank times the world, failing on overflow.
func (g *guard) perRank(op string, count int, t DType) (int, error) {
	bytes, err := g.typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkTotal(op, bytes, g.world); err != nil {
		return 0, err
	}
	return bytes, nil
}

// typedInto checks an out-of-place AllReduceInto (rooted false) or Reduce.
func (g *guard) typedInto(op string, send, recv DevicePtr, count int, t DType, r ReduceOp, root int, rooted bool) (int, error) {
	bytes, err := g.typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := g.checkOp(op, r, t); err != nil {
		return 0, err
	}
	recvCount := count
	if rooted {
		if err := checkRank(op, "root", root, g.world); err != nil {
			return 0, err
		}
		if g.rank != root { // recv is used on root only
			recvCount = 0
		}
	}
	return bytes, typedBuffers(op, t, true, span{"send", send, count}, span{"recv", recv, recvCount})
}

// typedBroadcastInto checks BroadcastInto: send is used on root only.
func (g *guard) typedBroadcastInto(send, recv DevicePtr, count int, t DType, root int) (int, error) {
	bytes, err := g.typed(opBroadcastInto, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkRank(opBroadcastInto, "root", root, g.world); err != nil {
		return 0, err
	}
	sendCount := count
	if g.rank != root {
		sendCount = 0
	}
	return bytes, typedBuffers(opBroadcastInto, t, false, span{"send", send, sendCount}, span{"recv", recv, count})
}

// typedAllToAll checks AllToAll: count elements per peer, buffers apart.
func (g *guard) typedAllToAll(send, recv DevicePtr, count int, t DType) (int, error) {
	bytes, err := g.perRank(opAllToAll, count, t)
	if err != nil {
		return 0, err
	}
	all := count * g.world
	if err := typedBuffers(opAllToAll, t, false, span{"send", send, all}, span{"recv", recv, all}); err != nil {
		return 0, err
	}
	return bytes, apart(opAllToAll, send, recv, bytes*g.world)
}

// typedRooted checks Gather (scatter false: root receives world*count) and Scatter
// (root sends world*count).
func (g *guard) typedRooted(op string, send, recv DevicePtr, count int, t DType, root int, scatter bool) (int, error) {
	bytes, err := g.perRank(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkRank(op, "root", root, g.world); err != nil {
		return 0, err
	}
	sendCount, recvCount := count, count*g.world
	if scatter {
		sendCount, recvCount = count*g.world, count
	}
	if g.rank != root { // gather's recv and scatter's send are used on root only
		if scatter {
			sendCount = 0
		} else {
			recvCount = 0
		}
	}
	return bytes, typedBuffers(op, t, false, span{"send", send, sendCount}, span{"recv", recv, recvCount})
}

// typedAllToAllv checks AllToAllv's per-peer counts and displacements (in elements) and
// returns the bytes sent and received.
func (g *guard) typedAllToAllv(send DevicePtr, sendCounts, sendDispls []int, recv DevicePtr, recvCounts, recvDispls []int, t DType) (int, error) {
	if _, err := g.typed(opAllToAllv, 0, t); err != nil {
		return 0, err
	}
	sent, sendExt, err := g.extent("send", sendCounts, sendDispls, t)
	if err != nil {
		return 0, err
	}
	received, recvExt, err := g.extent("recv", recvCounts, recvDispls, t)
	if err != nil {
		return 0, err
	}
	if me := g.rank; sendCounts[me] != recvCounts[me] {
		return 0, &ArgError{Op: opAllToAllv, Arg: fmt.Sprintf("recv count[%d]", me), Value: recvCounts[me], Err: ErrInvalidSize,
			Reason: fmt.Sprintf("this rank sends itself %d elements", sendCounts[me])}
	}
	if err := typedBuffers(opAllToAllv, t, false, span{"send", send, sendExt}, span{"recv", recv, recvExt}); err != nil {
		return 0, err
	}
	if sendExt > 0 && recvExt > 0 {
		es := t.Size()
		lo, hi := send, send+DevicePtr(sendExt*es)
		if recv < hi && lo < recv+DevicePtr(recvExt*es) {
			return 0, &ArgError{Op: opAllToAllv, Arg: "recv", Value: fmt.Sprintf("%#x", uint64(recv)), Err: ErrOverlap,
				Reason: fmt.Sprintf("%d elements at recv overlap %d elements at send %#x", recvExt, sendExt, uint64(send))}
		}
	}
	return (sent + received) * t.Size(), nil
}

// extent checks one side of AllToAllv: one count and one displacement per rank, none
// negative, none overflowing. It returns the total count and the extent in elements
// (the largest displacement + count).
func (g *guard) extent(side string, counts, displs []int, t DType) (total, ext int, err error) {
	if len(counts) != g.world || len(displs) != g.world {
		return 0, 0, &ArgError{Op: opAllToAllv, Arg: side + " counts", Value: len(counts), Err: ErrInvalidSize,
			Reason: fmt.Sprintf("%d counts and %d displacements: need one per rank (%d)", len(counts), len(displs), g.world)}
	}
	limit := math.MaxInt / t.Size()
	for r, n := range counts {
		d := displs[r]
		switch {
		case n < 0:
			return 0, 0, &ArgError{Op: opAllToAllv, Arg: fmt.Sprintf("%s count[%d]", side, r), Value: n, Err: ErrInvalidSize, Reason: "negative"}
		case d < 0:
			return 0, 0, &ArgError{Op: opAllToAllv, Arg: fmt.Sprintf("%s displacement[%d]", side, r), Value: d, Err: ErrInvalidSize, Reason: "negative"}
		case n > limit-d || total > limit-n:
			return 0, 0, &ArgError{Op: opAllToAllv, Arg: fmt.Sprintf("%s count[%d]", side, r), Value: n, Err: ErrInvalidSize,
				Reason: fmt.Sprintf("from displacement %d overflows (%s)", d, t)}
		}
		total += n
		if n > 0 {
			ext = max(ext, d+n)
		}
	}
	return total, ext, nil
}
