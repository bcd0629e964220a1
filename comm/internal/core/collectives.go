package core

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrOverlap: buffers of one operation overlap where the operation writes one while it
// reads or writes the other, which corrupts data on a GPU. A send buffer may overlap the
// receive buffer only at NCCL's in-place position: send == recv for AllReduceInto,
// BroadcastInto and Reduce (on root); send == recv + Rank()*size for AllGather and for
// Gather on root (size: the per-rank part); recv == send + Rank()*size for
// ReduceScatter and for Scatter on root. AllToAll's buffers must be apart, and
// AllToAllv's receive blocks must be apart from each other and from the send buffer.
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

// overlaps reports whether na bytes at a and nb bytes at b share a byte (without
// overflowing near the top of the address space).
func overlaps(a DevicePtr, na int, b DevicePtr, nb int) bool {
	if na <= 0 || nb <= 0 {
		return false
	}
	if a <= b {
		return uint64(b-a) < uint64(na)
	}
	return uint64(a-b) < uint64(nb)
}

// inPlaceOrApart fails with ErrOverlap when the per-rank buffer part (bytes at part,
// argument arg) overlaps the whole buffer (total bytes at whole, argument wholeArg)
// anywhere but at whole+at, the operation's in-place position.
func inPlaceOrApart(op, arg string, part DevicePtr, bytes int, wholeArg string, whole DevicePtr, total, at int) error {
	if part == whole+DevicePtr(at) || !overlaps(part, bytes, whole, total) {
		return nil
	}
	return &ArgError{Op: op, Arg: arg, Value: fmt.Sprintf("%#x", uint64(part)), Err: ErrOverlap,
		Reason: fmt.Sprintf("its %d bytes overlap the %d bytes of %s at %#x; in place is %s = %s + %d",
			bytes, total, wholeArg, uint64(whole), arg, wholeArg, at)}
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
		return 0, g.ranked(err)
	}
	if err := g.checkOp(op, r, t); err != nil {
		return 0, g.ranked(err)
	}
	recvCount := count
	if rooted {
		if err := CheckRank(op, "root", root, g.World); err != nil {
			return 0, g.ranked(err)
		}
		if g.Rank != root { // recv is used on root only
			recvCount = 0
		}
	}
	if err := TypedBuffers(op, t, true, Span{"send", send, count}, Span{"recv", recv, recvCount}); err != nil {
		return 0, g.ranked(err)
	}
	if recvCount == 0 {
		return bytes, nil
	}
	return bytes, g.ranked(inPlaceOrApart(op, "recv", recv, bytes, "send", send, bytes, 0))
}

// typedBroadcastInto checks BroadcastInto: send is used on root only.
func (g *Guard) TypedBroadcastInto(send, recv DevicePtr, count int, t DType, root int) (int, error) {
	bytes, err := g.Typed(OpBroadcastInto, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckRank(OpBroadcastInto, "root", root, g.World); err != nil {
		return 0, g.ranked(err)
	}
	sendCount := count
	if g.Rank != root {
		sendCount = 0
	}
	if err := TypedBuffers(OpBroadcastInto, t, false, Span{"send", send, sendCount}, Span{"recv", recv, count}); err != nil {
		return 0, g.ranked(err)
	}
	if sendCount == 0 {
		return bytes, nil
	}
	return bytes, g.ranked(inPlaceOrApart(OpBroadcastInto, "recv", recv, bytes, "send", send, bytes, 0))
}

// typedAllToAll checks AllToAll: count elements per peer, buffers apart.
func (g *Guard) TypedAllToAll(send, recv DevicePtr, count int, t DType) (int, error) {
	bytes, err := g.perRank(OpAllToAll, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	all := count * g.World
	if err := TypedBuffers(OpAllToAll, t, false, Span{"send", send, all}, Span{"recv", recv, all}); err != nil {
		return 0, g.ranked(err)
	}
	return bytes, g.ranked(apart(OpAllToAll, send, recv, bytes*g.World))
}

// typedRooted checks Gather (scatter false: root receives world*count) and Scatter
// (root sends world*count).
func (g *Guard) TypedRooted(op string, send, recv DevicePtr, count int, t DType, root int, scatter bool) (int, error) {
	bytes, err := g.perRank(op, count, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if err := CheckRank(op, "root", root, g.World); err != nil {
		return 0, g.ranked(err)
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
	if err := TypedBuffers(op, t, false, Span{"send", send, sendCount}, Span{"recv", recv, recvCount}); err != nil {
		return 0, g.ranked(err)
	}
	switch {
	case g.Rank != root:
		return bytes, nil
	case scatter:
		return bytes, g.ranked(inPlaceOrApart(op, "recv", recv, bytes, "send", send, bytes*g.World, root*bytes))
	}
	return bytes, g.ranked(inPlaceOrApart(op, "send", send, bytes, "recv", recv, bytes*g.World, root*bytes))
}

// typedAllToAllv checks AllToAllv's per-peer counts and displacements (in elements) and
// returns the bytes sent and received.
func (g *Guard) TypedAllToAllv(send DevicePtr, sendCounts, sendDispls []int, recv DevicePtr, recvCounts, recvDispls []int, t DType) (int, error) {
	if _, err := g.Typed(OpAllToAllv, 0, t); err != nil {
		return 0, g.ranked(err)
	}
	sent, sendExt, err := g.extent("send", sendCounts, sendDispls, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	received, recvExt, err := g.extent("recv", recvCounts, recvDispls, t)
	if err != nil {
		return 0, g.ranked(err)
	}
	if me := g.Rank; sendCounts[me] != recvCounts[me] {
		return 0, g.ranked(&ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("recv count[%d]", me), Value: recvCounts[me], Err: ErrInvalidSize,
			Reason: fmt.Sprintf("this rank sends itself %d elements", sendCounts[me])})
	}
	if err := TypedBuffers(OpAllToAllv, t, false, Span{"send", send, sendExt}, Span{"recv", recv, recvExt}); err != nil {
		return 0, g.ranked(err)
	}
	if err := recvBlocksApart(recvCounts, recvDispls, t); err != nil {
		return 0, g.ranked(err)
	}
	if sendExt > 0 && recvExt > 0 {
		es := t.Size()
		lo, hi := send, send+DevicePtr(sendExt*es)
		if recv < hi && lo < recv+DevicePtr(recvExt*es) {
			return 0, g.ranked(&ArgError{Op: OpAllToAllv, Arg: "recv", Value: fmt.Sprintf("%#x", uint64(recv)), Err: ErrOverlap,
				Reason: fmt.Sprintf("%d elements at recv overlap %d elements at send %#x", recvExt, sendExt, uint64(send))})
		}
	}
	return (sent + received) * t.Size(), nil
}

// recvBlocksApart fails with ErrOverlap when two of AllToAllv's non-empty receive
// blocks overlap (two peers would write the same elements). Displacements in rank order
// (the usual prefix sums) are checked in one pass without allocating; others are sorted.
func recvBlocksApart(counts, displs []int, t DType) error {
	end, sorted := 0, true
	for r, n := range counts {
		if n == 0 {
			continue
		}
		if displs[r] < end {
			sorted = false
			break
		}
		end = displs[r] + n
	}
	if sorted {
		return nil
	}
	order := make([]int, 0, len(counts))
	for r, n := range counts {
		if n > 0 {
			order = append(order, r)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return displs[a] - displs[b] })
	for i := 1; i < len(order); i++ {
		prev, r := order[i-1], order[i]
		if displs[r] < displs[prev]+counts[prev] {
			return &ArgError{Op: OpAllToAllv, Arg: fmt.Sprintf("recv displacement[%d]", r), Value: displs[r], Err: ErrOverlap,
				Reason: fmt.Sprintf("%d elements (%s) from rank %d overlap the %d elements at displacement %d from rank %d",
					counts[r], t, r, counts[prev], displs[prev], prev)}
		}
	}
	return nil
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
