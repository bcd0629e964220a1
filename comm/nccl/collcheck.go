package nccl

import (
	"errors"
	"runtime"
	"sync"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// The collective check (WithCollectiveCheck): before each collective, every rank
// copies the signature of its call (core.Signature, 40 bytes) to the scratch buffer,
// all-gathers it on the communicator's stream, copies the signatures back and waits
// for them (Sync), then compares them, every rank alike: a mismatch fails the call on
// every rank with a *comm.MismatchError before it reaches NCCL. Inside a group each
// collective is checked before it is queued, in the order of the calls: the exchange
// runs on a goroutine of its own, outside the caller's group, so that it is not held
// until GroupEnd; a rejected call is not queued (on any rank), and GroupEnd launches
// the others. Point-to-point calls, Barrier and AllReduceAsync are not checked.

// WithCollectiveCheck turns the collective check on or off: before each collective,
// in a group or not (a grouped one is checked when it is queued), every rank verifies that all ranks call the same operation with the
// same count, element type, root and reduction, and, when they do not, every rank's
// call fails with a *comm.MismatchError (errors.Is comm.ErrMismatch) naming two ranks
// and their calls, instead of hanging in NCCL. Each checked collective costs an
// all-gather of 40 bytes per rank, two host copies and a wait more
// (BenchmarkCollectiveCheckCost); the exchange shows in the flight recorder as an
// all_gather. Without the option the check is off unless the environment turns it on
// (NCCLGO_COLL_CHECK=1, or PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL). Every rank must
// have it on, or off. Split and shrunk children inherit it. A driver that cannot copy
// between host and device leaves the check off.
func WithCollectiveCheck(on bool) Option {
	return func(c *ncclcfg.Config) {
		c.CollCheck = 0
		if on {
			c.CollCheck = 1
		}
	}
}

// collCheck is a communicator's collective check state: the checks are serialised
// (mu) and numbered (seq); all holds the gathered signatures.
type collCheck struct {
	mu  sync.Mutex
	seq uint64
	all []byte
}

// checking reports whether c checks its collectives.
func (c *Communicator) checking() bool { return c.cfg.CollCheck > 0 }

// checkCall runs the check of s (its Seq is filled in) when it is on; with a group
// open on the calling goroutine, on a goroutine of its own.
func (c *Communicator) checkCall(s core.Signature) error {
	if c.cfg.CollCheck <= 0 {
		return nil
	}
	hc, ok := c.d.(gpulib.HostCopier)
	if !ok {
		return nil
	}
	if c.groupOf() == nil {
		return c.exchangeSig(hc, s)
	}
	done := make(chan error, 1)
	go func() {
		if err := bind(c.d); err != nil {
			done <- &comm.OpError{Op: s.Op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
			return
		}
		defer runtime.UnlockOSThread()
		done <- c.exchangeSig(hc, s)
	}()
	return <-done
}

// exchangeSig all-gathers s and compares, on a goroutine without a group open.
func (c *Communicator) exchangeSig(hc gpulib.HostCopier, s core.Signature) error {
	c.chk.mu.Lock()
	defer c.chk.mu.Unlock()
	c.chk.seq++
	s.Seq = c.chk.seq
	var mine [core.SigBytes]byte
	s.Encode(mine[:])
	if n := core.SigBytes * c.world; len(c.chk.all) != n {
		c.chk.all = make([]byte, n)
	}
	c.mu.Lock()
	errIn := hc.MemcpyHtoDAsync(c.scratch, mine[:], c.stream)
	c.mu.Unlock()
	err := c.enqueue(core.OpAllGather, core.SigBytes, queued, func(to ncclOps) error {
		return to.AllGather(c.scratch, c.scratch+core.SigBytes, core.SigBytes, gpulib.Uint8, c.comm, c.stream)
	})
	if err != nil {
		return errors.Join(errIn, err)
	}
	c.mu.Lock()
	errOut := hc.MemcpyDtoHAsync(c.chk.all, c.scratch+core.SigBytes, c.stream)
	c.mu.Unlock()
	if err := errors.Join(errIn, errOut, c.Sync(bg)); err != nil {
		return &comm.OpError{Op: s.Op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	if err := core.CompareSignatures(c.cfg.Name, c.chk.all, c.world); err != nil {
		return &comm.OpError{Op: s.Op, Bytes: -1, Rank: c.rank, GlobalRank: c.global, Name: c.cfg.Name, Err: err}
	}
	return nil
}

// sig is the signature of a call of op (root and red -1 where they do not apply).
func sig(op string, count int, t comm.DType, root int, red comm.ReduceOp) core.Signature {
	return core.Signature{Op: op, Count: int64(count), Type: int32(t), Root: int32(root), Reduce: int32(red)}
}
