package nccl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
	"github.com/ncclgo/ncclgo/comm/internal/rawdriver"
)

// NCCL versions that introduced the calls the backend makes beyond the 2.14 baseline
// (ncclCommInitRankConfig, non-blocking communicators, ncclCommFinalize).
const (
	versionSplit    = 21800 // ncclCommSplit
	versionRegister = 21900 // ncclCommRegister, ncclMemAlloc, ncclMemFree
	versionWindow   = 22703 // ncclCommWindowRegister
	versionShrink   = 22703 // ncclCommShrink, NCCL_SHRINK_ABORT
	versionRevoke   = 22807 // ncclCommRevoke
)

// versionString writes an NCCL version code (22907) as 2.29.7.
func versionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

// unsupported is the error of a call that needs a newer NCCL than the loaded one.
func unsupported(op, call string, since, loaded int) error {
	return &comm.ArgError{Op: op, Arg: "nccl version", Value: versionString(loaded), Err: comm.ErrUnsupported,
		Reason: fmt.Sprintf("%s needs NCCL %s (loaded %s)", call, versionString(since), versionString(loaded))}
}

// Backend is the comm.Backend over one rank of an NCCL communicator, built on a
// [Communicator] (the typed API on the same communicator).
//
// Semantics, per operation:
//   - AllReduce, AllGather, ReduceScatter, Broadcast enqueue on the communication stream
//     and wait for completion (within the operation timeout, checking
//     ncclCommGetAsyncError); inside a group (on this OS thread, opened on any
//     communicator of the process: see GroupStart) they only enqueue and the outermost
//     GroupEnd waits. AllReduce is in place; reductions sum the element type.
//   - Barrier enqueues a zero-count all-reduce and does not wait.
//   - SendTo and RecvFrom enqueue on the caller's stream and do not wait.
//   - AllReduceAsync orders the reduction after the work queued on the compute stream
//     and later compute work after it, with two events; the host never waits.
//   - RecvCommandU32 broadcasts 4 bytes from root and waits as long as ctx allows,
//     returning the first transport error NCCL reports.
//   - RegisterBuffer uses ncclCommRegister (NCCL >= 2.19); SymmetricAlloc uses
//     ncclMemAlloc (NCCL >= 2.19) and is local; RegisterWindow registers such memory
//     (or other NCCL window memory) as a symmetric window (ncclCommWindowRegister,
//     NCCL >= 2.27.3), a collective call that every rank makes; DeregisterWindow
//     releases it.
//   - IsHealthy is false after a fatal NCCL error or a completion timeout.
//   - AttemptReconnect needs WithReconnect (Connect and Job.NewNCCL set it: a
//     rendezvous in the job's next generation): it aborts the communicator and
//     initialises the next generation from the id the ReconnectFunc returns.
//   - SetAddKernel takes the in-place add kernel for the backend's element type
//     (package kernels: BF16 for BFloat16, F16 for Float16, F32 for Float32). With two
//     ranks, AllReduce and AllReduceAsync of 1 to WithTwoRankThreshold bytes outside a
//     group then exchange the buffers with ncclSend/ncclRecv in one group and add the
//     peer's data with the kernel, on the communication stream; the result is the
//     ncclAllReduce result bit for bit. comm cannot inspect a CUfunction: a kernel for
//     another element type computes garbage. Element types without an add kernel
//     ignore it. Every rank must set the kernel at the same point of its call
//     sequence; the scratch buffer the peer's data lands in grows on demand, is
//     registered with ncclCommRegister and freed on Close. See DefaultTwoRankThreshold.
type Backend struct {
	c    *Communicator
	elem comm.DType
	size int

	addKernel atomic.Uintptr
	two       twoRank
	cmd       command // RecvCommandU32's pending receive

	regMu      sync.Mutex
	regs       map[comm.BufferHandle]gpulib.Handle
	nextHandle comm.BufferHandle
	syms       map[comm.DevicePtr]int // SymmetricAlloc's allocations and their sizes
	userWins   userWindows            // RegisterWindow's (register_window.go)
	generation int
}

var _ comm.Backend = (*Backend)(nil)

func init() { core.MarkChecked((*Backend)(nil)) }

// unmade stands for the communicator of the zero Backend: its guard is nil, so every
// operation fails (ErrClosed: not made by a constructor) before using anything else.
// Nothing writes it.
var unmade Communicator

// conn returns b's communicator, or unmade for the zero Backend: the exported methods
// reach the communicator through it.
func (b *Backend) conn() *Communicator {
	if c := b.c; c != nil {
		return c
	}
	return &unmade
}

// Communicator is the comm.Communicator of one rank of an NCCL communicator. It is
// created non-blocking (ncclCommInitRankConfig with blocking = 0) and enqueues every
// operation on its own non-blocking CUDA stream; it also implements StreamSyncer. The
// host waits only in Sync, Barrier, Split and Close, and every wait keeps polling
// ncclCommGetAsyncError, so a transport error ends it with that error.
//
// A Communicator is safe for concurrent use: calls into NCCL are serialised, and
// Close interrupts a goroutine that is waiting. Teardown happens only in Close (never
// from a finalizer): a bounded wait for pending work, ncclCommFinalize with a deadline,
// then ncclCommDestroy, or ncclCommAbort when the communicator failed or the deadline
// passed.
type Communicator struct {
	g       *core.Guard
	d       gpulib.Driver
	cfg     ncclcfg.Config
	rank    int
	global  int // rank in the world this communicator was split or shrunk from
	world   int
	version int

	// life: operations hold it shared; Close and re-initialisation hold it exclusively,
	// after setting interrupt so that waiting operations give up.
	life      sync.RWMutex
	interrupt atomic.Int32 // interruptNone, interruptClose, interruptReconnect or interruptAbort

	// mu serialises calls into the driver that use comm, the stream or the events.
	mu      sync.Mutex
	comm    gpulib.Comm
	stream  gpulib.Stream
	evIn    gpulib.Event // recorded on a caller's stream, waited on by stream
	evOut   gpulib.Event // recorded on stream, waited on by a caller's stream
	evCmd   gpulib.Event // recorded after a command receive (RecvCommandU32)
	evAhead gpulib.Event // recorded before it, after work the watchdog had not marked
	cmdAt   int64        // UnixNano the command receive was enqueued (under mu)
	aheadAt int64        // UnixNano of the first work evAhead covers; 0 for none (under mu)
	scratch gpulib.Ptr   // scratchBytes device bytes: Barrier's operand, zero-size operations' pointer

	faultMu sync.Mutex
	fault   error
	faulted atomic.Bool // fault != nil, readable without faultMu
	// dumped is closed once the fault has been logged and dumped (under faultMu, made
	// with fault): every fail waits for it, so an error that reports the failure comes
	// back once the failure's dump is written (or dumpWait has passed).
	dumped chan struct{}

	suspended atomic.Bool // Suspend succeeded (or is under way) and Resume has not (suspend.go)

	// cmdArmed: evCmd marks a command receive the watchdog has not seen complete; work
	// queued behind it is not timed until it completes (a deadline-free wait).
	cmdArmed atomic.Bool

	// grouped counts the open thread groups holding operations of this communicator
	// (group.go); the watchdog does not abort while it is non-zero.
	grouped atomic.Int32
	// opened counts the group levels this communicator opened that are still open, on
	// any goroutine (group.go).
	opened atomic.Int32
	// group caches the open group the last grouped operation found (group.go).
	group atomic.Pointer[threadGroup]
	// direct is d as the calls an operation makes outside a group (ops.go).
	direct ncclOps
	// ones is d's one-sided calls, nil without them (onesided.go).
	ones gpulib.OneSided

	// onClose runs in Close before the communicator ends (the Backend's cleanup).
	onClose func(ctx context.Context, note func(string, error))

	// rec is the flight recorder (flightrec.go), shared with the communicators
	// shrunk or split from this one; ownsRec says this one closes it. fr is this
	// communicator's ring, frName and frRanks its name and members' global ranks.
	// children counts the shrinks made from it. nil and zero while the recorder is off.
	// splits counts the Splits made from it, recorder or not (every rank of it makes
	// each Split, so the count names a split alike on every rank).
	rec      *flightrec.Recorder
	ownsRec  bool
	fr       *flightrec.Comm
	frName   string
	frRanks  []int
	children atomic.Int32
	splits   atomic.Int32

	// wd is the health watchdog (WithWatchdog), nil without one. Set once in adopt.
	wd *watchdog

	// closeCtx is canceled when Close starts (see untilClose).
	closeOnce   sync.Once
	closeCtx    context.Context
	closeCancel context.CancelFunc

	chk collCheck // the collective check (collcheck.go)
}

var (
	_ comm.Communicator = (*Communicator)(nil)
	_ comm.StreamSyncer = (*Communicator)(nil)
)

// New creates rank's Backend of a world-rank NCCL communicator from id (created by
// one rank with NewUniqueID and shared with the others), loading NCCL and CUDA at run
// time. Initialisation is non-blocking and waits for the other ranks as long as ctx and
// the operation timeout allow. Options: WithElementType, WithDevice, WithTimeout,
// WithCloseTimeout, WithLogger, WithName, WithReconnect, WithPollInterval,
// WithTwoRankThreshold, WithWatchdog, WithAbortOnFailure, WithFlightRecorder, and the
// ncclConfig_t settings
// (WithBlocking, WithCTAs, WithConfigField, ...).
func New(ctx context.Context, id comm.UniqueID, rank, world int, opts ...Option) (*Backend, error) {
	cfg := newConfig(opts)
	if err := core.CheckWorld(core.OpInit, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	if err := checkTwoRankThreshold(rank, cfg.TwoRankMax); err != nil {
		return nil, err
	}
	d, err := ncclcfg.DriverFor(cfg, cfg.Device, rank)
	if err != nil {
		return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	return newNCCL(ctx, d, id, rank, world, cfg)
}

// NewUniqueID creates a new NCCL unique id (ncclGetUniqueId) for NewNCCL. One rank
// creates it and shares it with the others.
func NewUniqueID() (comm.UniqueID, error) {
	id, err := rawdriver.UniqueID()
	if err != nil {
		return comm.UniqueID{}, fmt.Errorf("get-unique-id: %w", err)
	}
	return comm.UniqueID(id), nil
}

func newNCCL(ctx context.Context, d gpulib.Driver, id comm.UniqueID, rank, world int, cfg ncclcfg.Config) (*Backend, error) {
	if err := checkTwoRankThreshold(rank, cfg.TwoRankMax); err != nil {
		return nil, err
	}
	c, err := newNCCLCommunicator(ctx, d, id, rank, world, cfg)
	if err != nil {
		return nil, err
	}
	b := backendOf(c, cfg.Elem)
	if cfg.Job.Owns {
		b.ownJob()
	}
	return b, nil
}

// backendOf makes the Backend over c, reducing elements of elem.
func backendOf(c *Communicator, elem comm.DType) *Backend {
	b := &Backend{c: c, elem: elem, size: elem.Size()}
	c.onClose = b.release
	return b
}

// newNCCLCommunicator initialises rank's communicator of world ranks from id on d.
func newNCCLCommunicator(ctx context.Context, d gpulib.Driver, id comm.UniqueID, rank, world int, cfg ncclcfg.Config) (*Communicator, error) {
	if d == nil {
		return nil, errors.New("init: driver is nil")
	}
	if err := core.CheckWorld(core.OpInit, rank, world, cfg.Elem, "nccl.WithElementType"); err != nil {
		return nil, err
	}
	version, err := d.Version()
	if err != nil {
		return nil, &comm.OpError{Op: "get-version", Bytes: -1, Rank: rank, GlobalRank: rank, Err: err}
	}
	if err := checkConfig(cfg.Nccl, version); err != nil {
		return nil, err
	}
	c := &Communicator{d: d, direct: d, ones: oneSidedOf(d), cfg: cfg, rank: rank, global: rank, world: world, version: version}
	comm, err := c.initComm(ctx, id, core.OpInit)
	if err != nil {
		return nil, err
	}
	if err := c.adopt(comm, rank, world); err != nil {
		return nil, err
	}
	c.startRecorder()
	return c, nil
}

// Communicator returns the typed API on the same communicator. Closing either closes
// both.
func (b *Backend) Communicator() *Communicator { return b.c }

// ElementType is the element type the backend reduces.
func (b *Backend) ElementType() comm.DType { return b.elem }

// Rank is this rank's index.
func (b *Backend) Rank() int { return b.conn().rank }

// WorldSize is the number of ranks.
func (b *Backend) WorldSize() int { return b.conn().world }

// Rank is this rank's index, from 0.
func (c *Communicator) Rank() int { return c.rank }

// WorldSize is the number of ranks.
func (c *Communicator) WorldSize() int { return c.world }

// Version is the loaded NCCL's version code (e.g. 22907 for 2.29.7).
func (c *Communicator) Version() int { return c.version }

// IsHealthy reports false after Close, after a fatal NCCL error or a completion timeout,
// and when ncclCommGetAsyncError reports an error now.
func (b *Backend) IsHealthy() bool { return b.conn().IsHealthy() }

// Close tears the backend down: a bounded wait for pending work, deregistration of
// what is left registered, freeing of symmetric memory, then finalize and destroy, or
// abort. Errors are logged and returned, among them what Close had to abandon (see
// Communicator.Close); Close never panics.
func (b *Backend) Close() error { return b.conn().Close() }
