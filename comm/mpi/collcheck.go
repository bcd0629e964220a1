package mpi

import (
	"sync"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// The collective check (WithCollectiveCheck): before each collective, an MPI_Allgather
// of every rank's signature of the call (core.Signature: 40 bytes) on the same
// communicator, compared on every rank alike; a mismatch fails the collective on
// every rank with a *comm.MismatchError before it reaches MPI. Point-to-point calls and
// Barrier are not checked.

// checkOption is WithCollectiveCheck's setting.
type checkOption struct {
	set, on bool
}

// checkState is a communicator's collective check: the number of checks made and the
// gather buffer (guarded by c.mu).
type checkState struct {
	seq uint64
	buf []byte
}

// WithCollectiveCheck turns the collective check on or off: before each collective,
// every rank verifies that all ranks call the same operation with the same count,
// element type, root and reduction, and, when they do not, every rank's call fails with
// a *comm.MismatchError (errors.Is comm.ErrMismatch) naming two ranks and their calls,
// instead of MPI returning a partial result or hanging. Each checked collective costs
// one MPI_Allgather of 40 bytes per rank more (BenchmarkMPICollectiveCheck). Without
// the option the check is off unless the environment turns it on
// (NCCLGO_COLL_CHECK=1, or PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL). Every rank must
// have it on, or off: a rank that checks waits for the others' signatures. Split
// children inherit it.
func WithCollectiveCheck(on bool) Option {
	return func(o *options) { o.check = checkOption{set: true, on: on} }
}

var checkEnv = sync.OnceValues(core.CollCheckFromEnv)

// checking reports whether c checks its collectives.
func (c *Communicator) checking() bool {
	if c.cfg.check.set {
		return c.cfg.check.on
	}
	on, err := checkEnv()
	if err != nil {
		c.cfg.log.Warn("comm: collective check off", "rank", c.rank, "err", err)
	}
	return on
}

// lockChecked is lock followed, when the check is on, by the check of the call s
// (its Op and Seq are filled in): on a mismatch or a failed exchange it releases the
// lock and returns the error.
func (c *Communicator) lockChecked(op string, count int, t comm.DType, root int, red comm.ReduceOp, noRed bool) error {
	if err := c.lock(op); err != nil {
		return err
	}
	if !c.checking() {
		return nil
	}
	s := core.Signature{Op: op, Count: int64(count), Type: int32(t), Root: int32(root), Reduce: int32(red)}
	if noRed {
		s.Reduce = -1
	}
	if err := c.checkCall(s); err != nil {
		c.mu.Unlock()
		return err
	}
	return nil
}

// checkCall all-gathers s and compares; c.mu is held.
func (c *Communicator) checkCall(s core.Signature) error {
	c.chk.seq++
	s.Seq = c.chk.seq
	n := core.SigBytes * (c.world + 1)
	if cap(c.chk.buf) < n {
		c.chk.buf = make([]byte, n)
	}
	b := c.chk.buf[:n]
	s.Encode(b[:core.SigBytes])
	all := b[core.SigBytes:]
	c.calls++
	err := mpi.Allgather(unsafe.Pointer(&b[0]), core.SigBytes, c.p.types[comm.Uint8],
		unsafe.Pointer(&all[0]), core.SigBytes, c.p.types[comm.Uint8], c.comm)
	if err != nil {
		return c.opErr(s.Op, -1, err)
	}
	return c.opErr(s.Op, -1, core.CompareSignatures("", all, c.world))
}
