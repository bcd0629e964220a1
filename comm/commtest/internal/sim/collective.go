package sim

import (
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// collDesc is one rank's call of a collective.
type collDesc struct {
	call       string // ncclAllReduce, ncclBroadcast, ncclAllGather, ncclReduceScatter, ncclReduce, ncclAlltoAll, ncclGather, ncclScatter
	send, recv gpulib.Ptr
	count      uint64 // as passed: all-gather's sendcount, reduce-scatter's recvcount, per-peer counts of the others
	dt         gpulib.DataType
	op         gpulib.RedOp // reductions only
	root       int          // rooted calls only (broadcast, reduce, gather, scatter)
	pre        *preMulOp    // op's PreMulSum operator, resolved at enqueue; nil for built-in ops
}

func (c *collDesc) reduces() bool {
	return c.call == "ncclAllReduce" || c.call == "ncclReduceScatter" || c.call == "ncclReduce"
}

// rooted reports whether the call has a root.
func (c *collDesc) rooted() bool {
	switch c.call {
	case "ncclBroadcast", "ncclReduce", "ncclGather", "ncclScatter":
		return true
	}
	return false
}

// signature is what every rank must agree on.
func (c *collDesc) signature() string {
	op := opName(c.op)
	if c.pre != nil {
		op = "ncclPreMulSum"
	}
	switch {
	case c.reduces() && c.rooted():
		return fmt.Sprintf("%s(count %d, %s, %s, root %d)", c.call, c.count, dtypeName(c.dt), op, c.root)
	case c.reduces():
		return fmt.Sprintf("%s(count %d, %s, %s)", c.call, c.count, dtypeName(c.dt), op)
	case c.rooted():
		return fmt.Sprintf("%s(count %d, %s, root %d)", c.call, c.count, dtypeName(c.dt), c.root)
	}
	return fmt.Sprintf("%s(count %d, %s)", c.call, c.count, dtypeName(c.dt))
}

// sizes returns the bytes read from send and written to recv by rank on n ranks, and
// whether they fit in 64 bits.
func (c *collDesc) sizes(rank, n int) (in, out uint64, ok bool) {
	hi, per := bits.Mul64(c.count, uint64(elemSize(c.dt)))
	hi2, all := bits.Mul64(per, uint64(n))
	if hi != 0 || hi2 != 0 || all > 1<<62 {
		return 0, 0, false
	}
	switch c.call {
	case "ncclAllGather":
		return per, all, true
	case "ncclReduceScatter":
		return all, per, true
	case "ncclBroadcast":
		if rank != c.root {
			return 0, per, true
		}
	case "ncclReduce": // recvbuff is used on root only
		if rank != c.root {
			return per, 0, true
		}
	case "ncclAlltoAll":
		return all, all, true
	case "ncclGather": // recvbuff is used on root only
		if rank != c.root {
			return per, 0, true
		}
		return per, all, true
	case "ncclScatter": // sendbuff is used on root only
		if rank != c.root {
			return 0, per, true
		}
		return all, per, true
	}
	return per, per, true
}

// prepareCollLocked validates a collective call and returns its task, or nil for a
// zero-count collective (NCCL discards those). Caller holds World.mu.
func (w *World) prepareCollLocked(d *device, c gpulib.Comm, s gpulib.Stream, desc *collDesc) (*task, error) {
	call := desc.call
	rc, st, err := w.operandsLocked(d, c, s, call, desc.dt)
	if err != nil {
		return nil, err
	}
	n := rc.cl.n
	if desc.reduces() && !validOp(desc.op) {
		pre := rc.redOps[desc.op]
		switch {
		case pre == nil:
			return nil, ncclErr(gpulib.InvalidArgument, call, "invalid reduction operation %d", int32(desc.op))
		case pre.dt != desc.dt:
			return nil, ncclErr(gpulib.InvalidArgument, call, "operator %d was created for %s, not %s", int32(desc.op), dtypeName(pre.dt), dtypeName(desc.dt))
		}
		d := *desc
		d.pre = pre
		desc = &d
	}
	switch {
	case desc.rooted() && (desc.root < 0 || desc.root >= n):
		return nil, ncclErr(gpulib.InvalidArgument, call, "root %d out of range [0, %d)", desc.root, n)
	}
	in, out, ok := desc.sizes(rc.rank, n)
	if !ok {
		return nil, ncclErr(gpulib.InvalidArgument, call, "count %d of %s on %d ranks overflows", desc.count, dtypeName(desc.dt), n)
	}
	if desc.count == 0 {
		return nil, nil
	}
	if err := d.check(desc.send, in); err != nil {
		return nil, ncclErr(gpulib.InvalidArgument, call, "sendbuff [%#x, +%d): %v", uint64(desc.send), in, err)
	}
	if err := d.check(desc.recv, out); err != nil {
		return nil, ncclErr(gpulib.InvalidArgument, call, "recvbuff [%#x, +%d): %v", uint64(desc.recv), out, err)
	}
	if msg := desc.overlap(rc.rank, in, out); msg != "" {
		return nil, ncclErr(gpulib.InvalidArgument, call, "%s", msg)
	}
	return &task{rc: rc, s: st, coll: desc}, nil
}

// overlap describes rank's send and receive buffers (in and out bytes, as sizes
// returns) overlapping anywhere but at NCCL's in-place position, "" when they do not:
// on a GPU the kernels would read data they have already overwritten, so the simulator
// reports what it would otherwise compute exactly. In place is sendbuff == recvbuff for
// all-reduce, broadcast and reduce, sendbuff == recvbuff + rank*size for all-gather and
// gather, recvbuff == sendbuff + rank*size for reduce-scatter and scatter; all-to-all
// has none.
func (c *collDesc) overlap(rank int, in, out uint64) string {
	if !spansOverlap(c.send, in, c.recv, out) {
		return ""
	}
	at := uint64(rank) * c.count * uint64(elemSize(c.dt))
	var inPlace string
	switch c.call {
	case "ncclAlltoAll":
	case "ncclAllGather", "ncclGather":
		if c.send == c.recv+gpulib.Ptr(at) {
			return ""
		}
		inPlace = fmt.Sprintf("; in place is sendbuff = recvbuff + %d", at)
	case "ncclReduceScatter", "ncclScatter":
		if c.recv == c.send+gpulib.Ptr(at) {
			return ""
		}
		inPlace = fmt.Sprintf("; in place is recvbuff = sendbuff + %d", at)
	default:
		if c.send == c.recv {
			return ""
		}
		inPlace = "; in place is sendbuff = recvbuff"
	}
	return fmt.Sprintf("sendbuff [%#x, +%d) and recvbuff [%#x, +%d) overlap (a data race on a GPU)%s",
		uint64(c.send), in, uint64(c.recv), out, inPlace)
}

// spansOverlap reports whether na bytes at a and nb bytes at b share a byte.
func spansOverlap(a gpulib.Ptr, na uint64, b gpulib.Ptr, nb uint64) bool {
	if na == 0 || nb == 0 {
		return false
	}
	if a <= b {
		return uint64(b-a) < na
	}
	return uint64(a-b) < nb
}

// operandsLocked checks what every NCCL communication call names (a ready communicator
// of d, one of d's streams, a known data type) and returns the first two. Caller holds
// World.mu.
func (w *World) operandsLocked(d *device, c gpulib.Comm, s gpulib.Stream, call string, dt gpulib.DataType) (*rankComm, *stream, error) {
	rc, err := w.commLocked(d, c, call)
	if err != nil {
		return nil, nil, err
	}
	if err := rc.readyLocked(call); err != nil {
		return nil, nil, err
	}
	st, err := w.streamLocked(d, s)
	if err != nil {
		return nil, nil, ncclErr(gpulib.InvalidArgument, call, "%v", err)
	}
	if elemSize(dt) == 0 {
		return nil, nil, ncclErr(gpulib.InvalidArgument, call, "invalid data type %d", int32(dt))
	}
	return rc, st, nil
}

// collSlot is the k-th collective of a communicator, shared by its ranks. Guarded by
// World.mu until full is closed; afterwards descs and inputs are read-only.
type collSlot struct {
	descs     []*collDesc
	described int
	inputs    [][]byte
	arrived   int
	full      chan struct{} // every rank has deposited its input
	consumed  int

	once   sync.Once
	result []byte
}

func newCollSlot(n int) *collSlot {
	return &collSlot{descs: make([]*collDesc, n), inputs: make([][]byte, n), full: make(chan struct{})}
}

// describeLocked records rank's call and checks, once every rank has called, that all
// calls agree. Caller holds World.mu.
func (s *collSlot) describeLocked(cl *clique, seq uint64, rank int, desc *collDesc) {
	s.descs[rank] = desc
	s.described++
	if s.described < len(s.descs) {
		return
	}
	want := s.descs[0].signature()
	for r, d := range s.descs[1:] {
		if got := d.signature(); got != want {
			cl.failLocked(gpulib.InvalidUsage, fmt.Sprintf("collective #%d does not match across ranks: rank 0 called %s, rank %d called %s",
				seq, want, r+1, got))
			return
		}
	}
}

// compute returns the collective's full result (all-reduce, broadcast, reduce: the
// buffer; all-gather, gather: the concatenation; reduce-scatter: the whole reduction;
// scatter: root's input; all-to-all: nil, see resultFor).
func (s *collSlot) compute() []byte {
	s.once.Do(func() {
		d := s.descs[0]
		switch d.call {
		case "ncclAlltoAll":
		case "ncclBroadcast", "ncclScatter":
			s.result = s.inputs[d.root]
		case "ncclAllGather", "ncclGather":
			for _, in := range s.inputs {
				s.result = append(s.result, in...)
			}
		default:
			s.result = make([]byte, len(s.inputs[0]))
			op := d.op
			if d.pre != nil { // the inputs are pre-multiplied
				op = gpulib.Sum
			}
			reduce(d.dt, op, s.result, s.inputs)
		}
	})
	return s.result
}

// runColl executes rank's part of a collective on its stream.
func (w *World) runColl(rc *rankComm, cl *clique, seq uint64, slot *collSlot, desc *collDesc) error {
	defer w.finishOp(rc)
	defer w.consume(cl, seq, slot)
	if !w.beforeOp(rc) {
		return nil
	}
	n := len(slot.descs)
	inBytes, outBytes, _ := desc.sizes(rc.rank, n)
	var in []byte
	if inBytes > 0 {
		var err error
		if in, err = rc.dev.read(desc.send, inBytes); err != nil {
			return w.deviceFault(cl, desc.call, rc.rank, "sendbuff", err)
		}
		if p := desc.pre; p != nil {
			scalar := p.host
			if p.device {
				if scalar, err = rc.dev.read(p.dev, uint64(elemSize(p.dt))); err != nil {
					return w.deviceFault(cl, desc.call, rc.rank, "scalar", err)
				}
			}
			in = preMultiply(desc.dt, in, scalar)
		}
	}
	w.mu.Lock()
	slot.inputs[rc.rank] = in
	slot.arrived++
	if slot.arrived == n {
		close(slot.full)
	}
	w.mu.Unlock()
	if !wait(slot.full, cl, rc) {
		return nil
	}
	if outBytes == 0 {
		return nil
	}
	if err := rc.dev.write(desc.recv, slot.resultFor(rc.rank, outBytes)); err != nil {
		return w.deviceFault(cl, desc.call, rc.rank, "recvbuff", err)
	}
	return nil
}

// resultFor returns what rank writes to its recvbuff: outBytes bytes.
func (s *collSlot) resultFor(rank int, outBytes uint64) []byte {
	d := s.descs[0]
	switch d.call {
	case "ncclReduceScatter", "ncclScatter":
		return s.compute()[uint64(rank)*outBytes : uint64(rank+1)*outBytes]
	case "ncclAlltoAll": // block i of the result is block rank of rank i's input
		per := outBytes / uint64(len(s.inputs))
		out := make([]byte, 0, outBytes)
		for _, in := range s.inputs {
			out = append(out, in[uint64(rank)*per:uint64(rank+1)*per]...)
		}
		return out
	}
	return s.compute()
}

func (w *World) consume(cl *clique, seq uint64, slot *collSlot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	slot.consumed++
	if slot.consumed == len(slot.descs) && cl.colls[seq] == slot {
		delete(cl.colls, seq)
	}
}

// wait blocks until ch closes and reports whether the operation may go on: false if the
// communicator broke, the rank's communicator was stopped or the device stopped.
func wait(ch <-chan struct{}, cl *clique, rc *rankComm) bool {
	select {
	case <-ch:
	case <-cl.broken:
		return false
	case <-rc.stop:
		return false
	case <-rc.devStop:
		return false
	}
	select {
	case <-cl.broken:
		return false
	default:
		return true
	}
}

// deviceFault reports a bad access by device code: the kernel faults (a sticky CUDA
// error on the device) and the communicator fails so that peers do not wait forever.
func (w *World) deviceFault(cl *clique, call string, rank int, what string, err error) error {
	w.mu.Lock()
	cl.failLocked(gpulib.UnhandledCudaError, fmt.Sprintf("rank %d: %s kernel faulted on %s: %v", rank, call, what, err))
	w.mu.Unlock()
	return cudaErr(ErrorIllegalAddress, call, "rank %d %s: %v", rank, what, err)
}

// beforeOp applies injected faults to an operation about to run: a delay, or a hang
// until the communicator is stopped. It reports whether the operation may run.
func (w *World) beforeOp(rc *rankComm) bool {
	w.mu.Lock()
	d := rc.dev
	hang := d.hang > 0
	if hang {
		d.hang--
	}
	delay := d.delay
	w.mu.Unlock()
	if hang {
		select {
		case <-rc.stop:
		case <-rc.devStop:
		}
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-rc.stop:
			return false
		case <-rc.devStop:
			return false
		}
	}
	return true
}
