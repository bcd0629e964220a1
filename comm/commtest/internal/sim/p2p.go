package sim

import (
	"fmt"
	"math/bits"

	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
)

// p2pDesc is one rank's ncclSend or ncclRecv.
type p2pDesc struct {
	send  bool
	buf   gpulib.Ptr
	count uint64
	dt    gpulib.DataType
	peer  int
}

func (p *p2pDesc) call() string {
	if p.send {
		return "ncclSend"
	}
	return "ncclRecv"
}

// msgKey names the seq-th message from src to dst: sends and receives between a pair
// match in the order they were issued.
type msgKey struct {
	src, dst int
	seq      uint64
}

// p2pMsg is one message. A send completes only once the receiver has taken the data
// (rendezvous), so a send and a receive that must progress together need a group.
// Guarded by World.mu until sent is closed.
type p2pMsg struct {
	sendBytes, recvBytes int64 // -1 until that side has been issued
	data                 []byte
	sent                 chan struct{} // data deposited
	taken                chan struct{} // receiver done
}

func (w *World) prepareP2PLocked(d *device, c gpulib.Comm, s gpulib.Stream, p *p2pDesc) (*task, error) {
	call := p.call()
	rc, st, err := w.operandsLocked(d, c, s, call, p.dt)
	if err != nil {
		return nil, err
	}
	if n := rc.cl.n; p.peer < 0 || p.peer >= n {
		return nil, ncclErr(gpulib.InvalidArgument, call, "peer %d out of range [0, %d)", p.peer, n)
	}
	hi, bytes := bits.Mul64(p.count, uint64(elemSize(p.dt)))
	if hi != 0 || bytes > 1<<62 {
		return nil, ncclErr(gpulib.InvalidArgument, call, "count %d of %s overflows", p.count, dtypeName(p.dt))
	}
	if err := d.check(p.buf, bytes); err != nil {
		return nil, ncclErr(gpulib.InvalidArgument, call, "buffer [%#x, +%d): %v", uint64(p.buf), bytes, err)
	}
	return &task{rc: rc, s: st, p2p: p}, nil
}

// attachP2PLocked gives a send or receive its message. Caller holds World.mu.
func (w *World) attachP2PLocked(rc *rankComm, p *p2pDesc) (msgKey, *p2pMsg) {
	cl := rc.cl
	var key msgKey
	if p.send {
		key = msgKey{src: rc.rank, dst: p.peer, seq: rc.sendSeq[p.peer]}
		rc.sendSeq[p.peer]++
	} else {
		key = msgKey{src: p.peer, dst: rc.rank, seq: rc.recvSeq[p.peer]}
		rc.recvSeq[p.peer]++
	}
	m, ok := cl.msgs[key]
	if !ok {
		m = &p2pMsg{sendBytes: -1, recvBytes: -1, sent: make(chan struct{}), taken: make(chan struct{})}
		cl.msgs[key] = m
	}
	bytes := int64(p.count) * int64(elemSize(p.dt))
	if p.send {
		m.sendBytes = bytes
	} else {
		m.recvBytes = bytes
	}
	if m.sendBytes >= 0 && m.recvBytes >= 0 && m.sendBytes != m.recvBytes {
		cl.failLocked(gpulib.InvalidUsage, fmt.Sprintf("message #%d from rank %d to rank %d: send of %d bytes, receive of %d bytes",
			key.seq, key.src, key.dst, m.sendBytes, m.recvBytes))
	}
	return key, m
}

func (w *World) runSend(rc *rankComm, cl *clique, key msgKey, m *p2pMsg, p *p2pDesc) error {
	defer w.finishOp(rc)
	if !w.beforeOp(rc) {
		return nil
	}
	data, err := rc.dev.read(p.buf, p.count*uint64(elemSize(p.dt)))
	if err != nil {
		return w.deviceFault(cl, "ncclSend", rc.rank, "buffer", err)
	}
	w.mu.Lock()
	m.data = data
	close(m.sent)
	w.mu.Unlock()
	wait(m.taken, cl, rc)
	return nil
}

func (w *World) runRecv(rc *rankComm, cl *clique, key msgKey, m *p2pMsg, p *p2pDesc) error {
	defer w.finishOp(rc)
	if !w.beforeOp(rc) {
		return nil
	}
	if !wait(m.sent, cl, rc) {
		return nil
	}
	defer func() {
		w.mu.Lock()
		close(m.taken)
		delete(cl.msgs, key)
		w.mu.Unlock()
	}()
	if err := rc.dev.write(p.buf, m.data); err != nil {
		return w.deviceFault(cl, "ncclRecv", rc.rank, "buffer", err)
	}
	return nil
}
