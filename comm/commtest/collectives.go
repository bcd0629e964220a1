package commtest

import (
	"testing"

	"github.com/ncclgo/ncclgo/comm"
)

// typedCollectives checks the Communicator's out-of-place and rooted collectives and
// the all-to-alls on element type dt: results on every rank, inputs left as they were,
// and receive buffers that the operation does not use (non-root ranks of Reduce and
// Gather) left untouched.
func (e *env) typedCollectives(t *testing.T, cs []comm.Communicator, dt comm.DType, sync func(*testing.T)) {
	n, es := e.n, dt.Size()
	noop := e.h.NoOp
	garbage := func(bytes int) func(int) []byte { return func(int) []byte { return bytesOf(0x5a, bytes) } }
	for i, op := range allOps {
		const count = 6
		bytes := count * es
		send := e.buffers(t, bytes, func(r int) []byte { return inputs(op, dt, n, r, 0, count) })
		recv := e.buffers(t, bytes, garbage(bytes))
		e.all(t, func(r int) error { return cs[r].AllReduceInto(send[r], recv[r], count, dt, op) })
		sync(t)
		for _, r := range e.ranks() {
			checkBytes(t, dt, inputs(op, dt, n, r, 0, count), e.read(t, r, send[r], bytes), "all-reduce-into %v leaves send, rank %d", op, r)
			if !noop {
				checkBytes(t, dt, expected(op, dt, n, 0, count), e.read(t, r, recv[r], bytes), "all-reduce-into %v, rank %d", op, r)
			}
		}

		root := i % n
		recv = e.buffers(t, bytes, garbage(bytes))
		e.all(t, func(r int) error { return cs[r].Reduce(send[r], recv[r], count, dt, op, root) })
		sync(t)
		for _, r := range e.ranks() {
			want := bytesOf(0x5a, bytes)
			if r == root {
				want = expected(op, dt, n, 0, count)
			}
			if !noop {
				checkBytes(t, dt, want, e.read(t, r, recv[r], bytes), "reduce %v to root %d, rank %d", op, root, r)
			}
		}
	}

	const count = 3
	bytes := count * es
	for root := range n {
		send := e.buffers(t, bytes, func(r int) []byte { return tagged(r, bytes) })
		recv := e.buffers(t, bytes, garbage(bytes))
		e.all(t, func(r int) error { return cs[r].BroadcastInto(send[r], recv[r], count, dt, root) })
		sync(t)
		if !noop {
			for _, r := range e.ranks() {
				checkBytes(t, dt, tagged(root, bytes), e.read(t, r, recv[r], bytes), "broadcast-into from %d, rank %d", root, r)
			}
		}

		recv = e.buffers(t, bytes*n, garbage(bytes*n))
		e.all(t, func(r int) error { return cs[r].Gather(send[r], recv[r], count, dt, root) })
		sync(t)
		for _, r := range e.ranks() {
			want := bytesOf(0x5a, bytes*n)
			if r == root {
				want = want[:0]
				for q := range n {
					want = append(want, tagged(q, bytes)...)
				}
			}
			if !noop {
				checkBytes(t, dt, want, e.read(t, r, recv[r], bytes*n), "gather to root %d, rank %d", root, r)
			}
		}

		blocks := e.buffers(t, bytes*n, func(r int) []byte { return blocksOf(r, n, bytes) })
		recv = e.buffers(t, bytes, garbage(bytes))
		e.all(t, func(r int) error { return cs[r].Scatter(blocks[r], recv[r], count, dt, root) })
		sync(t)
		if !noop {
			for _, r := range e.ranks() {
				checkBytes(t, dt, tagged(root*n+r, bytes), e.read(t, r, recv[r], bytes), "scatter from root %d, rank %d", root, r)
			}
		}
	}

	// All-to-all: rank r's block j goes to rank j's block r.
	send := e.buffers(t, bytes*n, func(r int) []byte { return blocksOf(r, n, bytes) })
	recv := e.buffers(t, bytes*n, garbage(bytes*n))
	e.all(t, func(r int) error { return cs[r].AllToAll(send[r], recv[r], count, dt) })
	sync(t)
	if !noop {
		for _, r := range e.ranks() {
			var want []byte
			for q := range n {
				want = append(want, tagged(q*n+r, bytes)...)
			}
			checkBytes(t, dt, want, e.read(t, r, recv[r], bytes*n), "all-to-all, rank %d", r)
		}
	}
	e.all(t, func(r int) error { return cs[r].AllToAll(0, 0, 0, dt) }) // zero count, null pointers

	// All-to-allv: rank i sends (i+j)%3 elements to rank j, packed in reverse peer
	// order on the send side and with a gap of one element on the receive side.
	v := newAllToAllv(n)
	sendV := e.buffers(t, v.sendExtent*es, func(r int) []byte { return v.sendData(r, es) })
	recvV := e.buffers(t, v.recvExtent*es, garbage(v.recvExtent*es))
	e.all(t, func(r int) error {
		return cs[r].AllToAllv(sendV[r], v.sendCounts[r], v.sendDispls[r], recvV[r], v.recvCounts[r], v.recvDispls[r], dt)
	})
	sync(t)
	if !noop {
		for _, r := range e.ranks() {
			checkBytes(t, dt, v.recvData(r, es), e.read(t, r, recvV[r], v.recvExtent*es), "all-to-allv, rank %d", r)
		}
	}
}

// blocksOf is rank's n blocks of bytes each, block j tagged rank*n + j.
func blocksOf(rank, n, bytes int) []byte {
	var b []byte
	for j := range n {
		b = append(b, tagged(rank*n+j, bytes)...)
	}
	return b
}

// allToAllv is an uneven exchange among n ranks, with every rank's counts and
// displacements (in elements).
type allToAllv struct {
	n                      int
	sendCounts, sendDispls [][]int
	recvCounts, recvDispls [][]int
	sendExtent, recvExtent int // the largest buffer any rank needs, in elements
}

func newAllToAllv(n int) *allToAllv {
	v := &allToAllv{n: n}
	count := func(i, j int) int { return (i + j) % 3 }
	for i := range n {
		sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		off := 0
		for j := n - 1; j >= 0; j-- { // reverse peer order
			sc[j], sd[j] = count(i, j), off
			off += sc[j]
		}
		v.sendExtent = max(v.sendExtent, off)
		off = 0
		for j := range n { // rank j's block, then a one-element gap
			rc[j], rd[j] = count(j, i), off
			off += rc[j] + 1
		}
		v.recvExtent = max(v.recvExtent, off)
		v.sendCounts, v.sendDispls = append(v.sendCounts, sc), append(v.sendDispls, sd)
		v.recvCounts, v.recvDispls = append(v.recvCounts, rc), append(v.recvDispls, rd)
	}
	return v
}

// sendData is rank i's send buffer: the block for rank j tagged i*n + j.
func (v *allToAllv) sendData(i, es int) []byte {
	b := make([]byte, v.sendExtent*es)
	for j := range v.n {
		copy(b[v.sendDispls[i][j]*es:], tagged(i*v.n+j, v.sendCounts[i][j]*es))
	}
	return b
}

// recvData is what rank i's receive buffer holds afterwards: the blocks from every
// rank, the gaps untouched.
func (v *allToAllv) recvData(i, es int) []byte {
	b := bytesOf(0x5a, v.recvExtent*es)
	for j := range v.n {
		copy(b[v.recvDispls[i][j]*es:], tagged(j*v.n+i, v.recvCounts[i][j]*es))
	}
	return b
}

// badCollectives checks the validation of the collectives above on c's rank.
func (e *env) badCollectives(t *testing.T, c comm.Communicator, p comm.DevicePtr) {
	n, me := e.n, c.Rank() // rooted cases use root = me: recv and send matter on root only
	zeros := make([]int, n)
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	cases := []struct {
		name string
		call func() error
		want error
	}{
		{"all-reduce-into invalid op", func() error { return c.AllReduceInto(p, p+64, 1, comm.Float32, 9) }, comm.ErrInvalidOp},
		{"all-reduce-into null recv", func() error { return c.AllReduceInto(p, 0, 1, comm.Float32, comm.Sum) }, comm.ErrNullPointer},
		{"all-reduce-into misaligned send", func() error { return c.AllReduceInto(p+1, p+64, 1, comm.Float32, comm.Sum) }, comm.ErrMisaligned},
		{"broadcast-into root = world size", func() error { return c.BroadcastInto(p, p, 1, comm.Int8, n) }, comm.ErrInvalidRank},
		{"broadcast-into null recv", func() error { return c.BroadcastInto(p, 0, 1, comm.Int8, 0) }, comm.ErrNullPointer},
		{"reduce negative root", func() error { return c.Reduce(p, p, 1, comm.Int32, comm.Sum, -1) }, comm.ErrInvalidRank},
		{"reduce invalid type", func() error { return c.Reduce(p, p, 1, 77, comm.Sum, 0) }, comm.ErrInvalidType},
		{"reduce null recv on root", func() error { return c.Reduce(p, 0, 1, comm.Int32, comm.Sum, me) }, comm.ErrNullPointer},
		{"all-to-all negative count", func() error { return c.AllToAll(p, p+1024, -1, comm.Int8) }, comm.ErrInvalidSize},
		{"all-to-all null send", func() error { return c.AllToAll(0, p, 1, comm.Int8) }, comm.ErrNullPointer},
		{"all-to-all in place", func() error { return c.AllToAll(p, p, 1, comm.Int8) }, comm.ErrOverlap},
		{"all-to-all overflowing count", func() error { return c.AllToAll(p, p+1024, int(^uint(0)>>3), comm.Float64) }, comm.ErrInvalidSize},
		{"all-to-allv short counts", func() error { return c.AllToAllv(p, ones[1:], zeros, p+1024, ones, zeros, comm.Int8) }, comm.ErrInvalidSize},
		{"all-to-allv negative displacement", func() error {
			d := append([]int{-1}, zeros[1:]...)
			return c.AllToAllv(p, ones, d, p+1024, ones, zeros, comm.Int8)
		}, comm.ErrInvalidSize},
		{"all-to-allv self counts differ", func() error {
			two := append([]int(nil), ones...)
			two[me] = 2
			return c.AllToAllv(p, ones, zeros, p+1024, two, zeros, comm.Int8)
		}, comm.ErrInvalidSize},
		{"all-to-allv overlap", func() error { return c.AllToAllv(p, ones, zeros, p, ones, zeros, comm.Int8) }, comm.ErrOverlap},
		{"all-to-allv null recv", func() error { return c.AllToAllv(p, ones, zeros, 0, ones, zeros, comm.Int8) }, comm.ErrNullPointer},
		{"all-gather send overlapping recv off its in-place block", func() error {
			return c.AllGather(p+comm.DevicePtr(2*me+1), p, 2, comm.Int8)
		}, comm.ErrOverlap},
		{"reduce-scatter recv overlapping send off its in-place block", func() error {
			return c.ReduceScatter(p, p+comm.DevicePtr(8*me+4), 2, comm.Float32, comm.Sum)
		}, comm.ErrOverlap},
		{"all-reduce-into partly overlapping buffers", func() error { return c.AllReduceInto(p, p+4, 2, comm.Float32, comm.Sum) }, comm.ErrOverlap},
		{"gather on root: send overlapping recv off its in-place block", func() error {
			return c.Gather(p+comm.DevicePtr(2*me+1), p, 2, comm.Int8, me) // in place is p + 2*me
		}, comm.ErrOverlap},
		{"gather root = world size", func() error { return c.Gather(p, p, 1, comm.Int8, n) }, comm.ErrInvalidRank},
		{"gather null recv on root", func() error { return c.Gather(p, 0, 1, comm.Int8, me) }, comm.ErrNullPointer},
		{"scatter null send on root", func() error { return c.Scatter(0, p, 1, comm.Int8, me) }, comm.ErrNullPointer},
		{"scatter negative count", func() error { return c.Scatter(p, p, -2, comm.Int8, 0) }, comm.ErrInvalidSize},
	}
	if n > 1 {
		cases = append(cases, struct {
			name string
			call func() error
			want error
		}{"all-to-allv receive blocks all at displacement 0", func() error {
			return c.AllToAllv(p, ones, zeros, p+1024, ones, zeros, comm.Int8)
		}, comm.ErrOverlap})
	}
	for _, tc := range cases {
		e.expectFailure(t, tc.name, tc.call, tc.want)
	}
}

// closedCollectives checks that the collectives above fail with ErrClosed on a closed
// communicator.
func (e *env) closedCollectives(t *testing.T, c comm.Communicator, p comm.DevicePtr) {
	one := []int{1}
	for name, call := range map[string]func() error{
		"typed all-reduce-into": func() error { return c.AllReduceInto(p, p, 1, comm.Float32, comm.Sum) },
		"typed broadcast-into":  func() error { return c.BroadcastInto(p, p, 1, comm.Float32, 0) },
		"typed reduce":          func() error { return c.Reduce(p, p, 1, comm.Float32, comm.Sum, 0) },
		"typed all-to-all":      func() error { return c.AllToAll(p, p+64, 1, comm.Float32) },
		"typed all-to-allv":     func() error { return c.AllToAllv(p, one, one, p+64, one, one, comm.Float32) },
		"typed gather":          func() error { return c.Gather(p, p, 1, comm.Float32, 0) },
		"typed scatter":         func() error { return c.Scatter(p, p, 1, comm.Float32, 0) },
	} {
		e.expectFailure(t, name, call, comm.ErrClosed)
	}
}
