package core

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
	OpAllReduceInto = "all-reduce-into"
	OpBroadcastInto = "broadcast-into"
	OpReduce        = "reduce"
	OpAllToAll      = "all-to-all"
	OpAllToAllv     = "all-to-allv"
	OpGather        = "gather"
	OpScatter       = "scatter"
)

// span is a buffer argument: count elements at p (0: unused).
type Span struct {
	Arg   string
	P     DevicePtr
	Count int
}

// typedBuffers checks the buffers of a typed operation on elements of t: every used
// buffer non-null and, for reductions, aligned; its size in bytes, without overflow.
func TypedBuffers(op string, t DType, reduce bool, spans ...Span) error {
	es := t.Size()
	for _, s := range spans {
		if s.Count == 0 {
			continue
		}
		if s.Count > math.MaxInt/es {
			return &ArgError{Op: op, Arg: s.Arg, Value: s.Count, Err: ErrInvalidSize,
				Reason: fmt.Sprintf("%d elements of %d bytes (%s) overflow", s.Count, es, t)}
		}
		if err := CheckPtr(op, s.Arg, s.P, s.Count*es); err != nil {
			return err
		}
		if reduce {
			if err := checkAlign(op, s.Arg, s.P, t); err != nil {
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
func (g *Guard) perRank(op string, count int, t DType) (int, error) {
	bytes, err := g.Typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := checkTotal(op, bytes, g.World); err != nil {
		return 0, err
	}
	return bytes, nil
}

// typedInto checks an out-of-place AllReduceInto (rooted false) or Reduce.
func (g *Guard) TypedInto(op string, send, recv DevicePtr, count int, t DType, r ReduceOp, root int, rooted bool) (int, error) {
	bytes, err := g.Typed(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := g.checkOp(op, r, t); err != nil {
		return 0, err
	}
	recvCount := count
	if rooted {
		if err := CheckRank(op, "root", root, g.World); err != nil {
			return 0, err
		}
		if g.Rank != root { // recv is used on root only
			recvCount = 0
		}
	}
	return bytes, TypedBuffers(op, t, true, Span{"send", send, count}, Span{"recv", recv, recvCount})
}

// typedBroadcastInto checks BroadcastInto: send is used on root only.
func (g *Guard) TypedBroadcastInto(send, recv DevicePtr, count int, t DType, root int) (int, error) {
	bytes, err := g.Typed(OpBroadcastInto, count, t)
	if err != nil {
		return 0, err
	}
	if err := CheckRank(OpBroadcastInto, "root", root, g.World); err != nil {
		return 0, err
	}
	sendCount := count
	if g.Rank != root {
		sendCount = 0
	}
	return bytes, TypedBuffers(OpBroadcastInto, t, false, Span{"send", send, sendCount}, Span{"recv", recv, count})
}

// typedAllToAll checks AllToAll: count elements per peer, buffers apart.
func (g *Guard) TypedAllToAll(send, recv DevicePtr, count int, t DType) (int, error) {
	bytes, err := g.perRank(OpAllToAll, count, t)
	if err != nil {
		return 0, err
	}
	all := count * g.World
	if err := TypedBuffers(OpAllToAll, t, false, Span{"send", send, all}, Span{"recv", recv, all}); err != nil {
		return 0, err
	}
	return bytes, apart(OpAllToAll, send, recv, bytes*g.World)
}

// typedRooted checks Gather (scatter false: root receives world*count) and Scatter
// (root sends world*count).
func (g *Guard) TypedRooted(op string, send, recv DevicePtr, count int, t DType, root int, scatter bool) (int, error) {
	bytes, err := g.perRank(op, count, t)
	if err != nil {
		return 0, err
	}
	if err := CheckRank(op, "root", root, g.World); err != nil {
		return 0, err
	}
	sendCount, recvCount := count, count*g.World
	if scatter {
		sendCount, recvCount = count*g.World, count
	}
	if g.Rank != root { // gather's recv and scatter's send are used on root only
		if scatter {
			sendCount = 0
		} else {
			recvCount = 0
		}
	}
	return bytes, TypedBuffers(op, t, false, Span{"send", send, sendCount}, Span{"recv", recv, recvCount})
}

// typedAllToAllv checks AllToAllv's per-peer counts and displacements (in elements) and
// returns the bytes sent and received.
func (g *Guard) TypedAllToAllv(send DevicePtr, sendCounts, sendDispls []int, recv DevicePtr, recvCounts, recvDispls []int, t DType) (int, error) {
	if _, err := g.Typed(OpAllToAllv, 0, t); err != nil {
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
	if me := g.Rank; sendCounts[me] != recvCounts[me] {
		return 0, &ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("recv count[%d]", me), Value: recvCounts[me], Err: ErrInvalidSize,
			Reason: fmt.Sprintf("this rank sends itself %d elements", sendCounts[me])}
	}
	if err := TypedBuffers(OpAllToAllv, t, false, Span{"send", send, sendExt}, Span{"recv", recv, recvExt}); err != nil {
		return 0, err
	}
	if sendExt > 0 && recvExt > 0 {
		es := t.Size()
		lo, hi := send, send+DevicePtr(sendExt*es)
		if recv < hi && lo < recv+DevicePtr(recvExt*es) {
			return 0, &ArgError{Op: OpAllToAllv, Arg: "recv", Value: fmt.Sprintf("%#x", uint64(recv)), Err: ErrOverlap,
				Reason: fmt.Sprintf("%d elements at recv overlap %d elements at send %#x", recvExt, sendExt, uint64(send))}
		}
	}
	return (sent + received) * t.Size(), nil
}

// extent checks one side of AllToAllv: one count and one displacement per rank, none
// negative, none overflowing. It returns the total count and the extent in elements
// (the largest displacement + count).
func (g *Guard) extent(side string, counts, displs []int, t DType) (total, ext int, err error) {
	if len(counts) != g.World || len(displs) != g.World {
		return 0, 0, &ArgError{Op: OpAllToAllv, Arg: side + " counts", Value: len(counts), Err: ErrInvalidSize,
			Reason: fmt.Sprintf("%d counts and %d displacements: need one per rank (%d)", len(counts), len(displs), g.World)}
	}
	limit := math.MaxInt / t.Size()
	for r, n := range counts {
		d := displs[r]
		switch {
		case n < 0:
			return 0, 0, &ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("%s count[%d]", side, r), Value: n, Err: ErrInvalidSize, Reason: "negative"}
		case d < 0:
			return 0, 0, &ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("%s displacement[%d]", side, r), Value: d, Err: ErrInvalidSize, Reason: "negative"}
		case n > limit-d || total > limit-n:
			return 0, 0, &ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("%s count[%d]", side, r), Value: n, Err: ErrInvalidSize,
				Reason: fmt.Sprintf("from displacement %d overflows (%s)", d, t)}
		}
		total += n
		if n > 0 {
			ext = max(ext, d+n)
		}
	}
	return total, ext, nil
}
