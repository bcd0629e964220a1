package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/kernels"
	"github.com/ncclgo/ncclgo/raw/mpi"
)

// Communicator is a comm.Communicator over an MPI communicator (Open MPI's libmpi.so.40,
// loaded at run time through raw/mpi), for processes started by mpirun (or srun with
// PMIx). Its pointers are HOST addresses: the DevicePtr arguments carry the address of
// host memory the caller keeps alive and unmoved (C memory, or Go memory pinned with
// runtime.Pinner) until Sync returns. Device pointers work only with a CUDA-aware MPI,
// which Debian's Open MPI is not.
//
// Completion: the collectives (AllReduce, Broadcast, AllGather, ReduceScatter and the
// typed AllReduceInto, BroadcastInto, Reduce, Gather, Scatter, AllToAll, AllToAllv in
// collectives.go) are blocking MPI calls and have completed when they return. Send and Recv are non-blocking
// (MPI_Isend, MPI_Irecv with the tag) and complete in Sync, Barrier or Close; so a ring of
// sends and receives never deadlocks whatever the order in which the ranks post them,
// and GroupStart/GroupEnd (NCCL's grouping) only check nesting: there is nothing to
// defer. Sync, Barrier and Close poll (MPI_Testall, MPI_Ibarrier) so that ctx is
// honoured, sleeping between polls once a short spin is over (see mpiSpinFor).
//
// Threads: MPI is initialised with MPI_THREAD_MULTIPLE (Open MPI 4.1.4 grants it). Each
// communicator serialises its own calls with its own lock, so a Split child and its
// parent used from two goroutines proceed independently, as MPI requires (each
// communicator's collectives in the same order on every rank); when the application
// initialised MPI below MPI_THREAD_MULTIPLE (serialised at least), one process-wide lock
// serialises every call instead, and such a pair deadlocks. Goroutines may call from
// any OS thread; MPI_Init_thread and MPI_Finalize (which MPI wants on one thread) run
// on a goroutine locked to its OS thread. Signals: Open MPI installs its backtrace
// handlers (OMPI_MCA_opal_signal: SIGABRT, SIGBUS, SIGFPE, SIGSEGV) only where no handler
// is installed, so Go's stay and a nil dereference is still a recoverable panic after
// MPI_Init; Go's own signals (SIGURG preemption, SA_RESTART) go to Go threads only and do
// not disturb MPI's progress (the tests run collectives from several goroutines under
// garbage collection, with -race). Go's scheduler: a goroutine making blocking MPI calls
// yields (runtime.Gosched) after one of them every 2 ms, or sysmon would take its P
// away from nearly every long call (see mpiYieldEvery); ranks that mpirun binds to one
// core should run with GOMAXPROCS 2 or more (WithMinGOMAXPROCS, or mpirun -x
// GOMAXPROCS=2), or every call lasting across two of sysmon's ticks loses its P. While
// other goroutines wait for a P, the communicator does not yield, and its blocking
// collectives run on a progress thread of the communicator (a C thread, outside Go's
// scheduler) while the calling goroutine waits on a timer: a goroutine returning from a
// long cgo call, or yielding, would queue behind every runnable goroutine (see
// progress.go).
//
// Element types: the eight MPI has (int8 ... uint64 as MPI_INT8_T ..., float32 and
// float64) reduce with MPI's predefined operations, except integer Sum and Prod, which
// wrap around as NCCL's do through user-defined operations (Open MPI's AVX component
// saturates 8-bit sums), and float32 and float64 Max and Min, which follow the narrow
// formats' rule below; float16, bfloat16 and the two fp8 formats reduce with
// user-defined operations written in C, which widen to float32, combine and round once,
// bit for bit as the Go reference in package kernels. Max and Min of every floating
// type ignore a NaN operand and order -0 below +0: Min(-0, +0) is -0 whichever rank
// holds which. Avg is
// NCCL's: floating contributions are pre-multiplied by 1/n (rounded to the format) and
// summed, integers are summed and divided. Counts must fit MPI's int (2^31-1 elements;
// bytes for the byte movers).
//
// Bad input fails with comm's validation errors (*ArgError) before any MPI call; MPI's
// own errors come back as *OpError wrapping mpi.ErrorCode (the communicator is created
// with MPI_ERRORS_RETURN).
type Communicator struct {
	g     *core.Guard
	p     *mpiProcess
	cfg   options
	comm  mpi.Comm
	rank  int
	world int
	// mu serialises the communicator's MPI calls: its own lock under MPI_THREAD_MULTIPLE,
	// the process's (p.mu) under a lower thread level. The fields below are guarded by it.
	mu      *sync.Mutex
	reqs    []mpi.Request // pending Isend/Irecv/Ibarrier
	posted  []posted      // what each of reqs is, for errors
	stats   []mpi.Status  // Testall's statuses, as many as reqs
	tmp     []byte        // scratch of the pre-multiplied Avg contributions
	calls   int64         // MPI calls made, see MPICalls (a plain add under the lock costs less than an atomic one)
	yielded time.Time     // the last yield of a goroutine making blocking calls (unlockBlocking)
	// contended says that the last nap of a wait took a scheduling slice longer than
	// asked: waits nap without spinning first (see mpiSpinFor).
	contended atomic.Bool
	pins      []*runtime.Pinner // Go memory of the pending slice Send and Recv (slices.go)
	prog      progress          // the progress thread of blocking calls under contention (progress.go)
	offloads  int64             // calls made on prog, for the tests
	fr        frState           // the flight recorder (flightrec.go)
	chk       checkState        // the collective check (collcheck.go)
}

var _ comm.Communicator = (*Communicator)(nil)

// mpiOps is what an invalid reduction operator's error says the communicator has: MPI
// has no pre-multiplied sums (PreMulSum fails with ErrUnsupported).
const mpiOps = "mpi's MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, and avg as a sum divided by the ranks; no pre-mul-sum operators"

// mpiProcess is the process's MPI: initialised once, finalised once.
type mpiProcess struct {
	mu        sync.Mutex // serialises the calls on MPI_COMM_WORLD and the operators; every call below MPI_THREAD_MULTIPLE
	multiple  bool       // MPI provides MPI_THREAD_MULTIPLE: each communicator has its own lock
	owner     bool       // comm called MPI_Init_thread, so it calls MPI_Finalize
	finalized atomic.Bool
	refs      int // open communicators
	main      chan func()
	types     [len(core.DtypeInfo)]mpi.Datatype
	ops       [len(core.DtypeInfo)][4]mpi.Op // Sum, Prod, Max, Min (Avg is composed)
	userOps   []mpi.Op                       // created here, freed with the last communicator
	tagUB     int
}

var (
	mpiMu   sync.Mutex // guards mpiProc
	mpiProc *mpiProcess
)

// Narrow element formats and operators of the C user functions (ops_cgo.go).
const (
	mpiF16 = iota
	mpiBF16
	mpiE4M3
	mpiE5M2
)

const (
	mpiOpSum = iota
	mpiOpProd
	mpiOpMax
	mpiOpMin
)

func narrowFormat(t comm.DType) (int, bool) {
	switch t {
	case comm.Float16:
		return mpiF16, true
	case comm.BFloat16:
		return mpiBF16, true
	case comm.Float8E4M3:
		return mpiE4M3, true
	case comm.Float8E5M2:
		return mpiE5M2, true
	}
	return 0, false
}

// New returns this process's rank of MPI_COMM_WORLD as a Communicator (a duplicate
// of it, so that its messages never match the application's own). It initialises MPI
// (MPI_Init_thread, MPI_THREAD_MULTIPLE) unless the process already did, in which case
// the thread level provided must be at least serialised (below multiple, every call of
// the process is serialised: see Communicator). MPI_Init waits for every rank
// that mpirun started; if ctx ends first New returns ctx's error while the
// initialisation goes on, and the process should exit. Options: WithLogger,
// WithCloseTimeout, WithMinGOMAXPROCS (recommended for ranks that mpirun binds to one
// core: see there).
func New(ctx context.Context, opts ...Option) (*Communicator, error) {
	cfg := newOptions(opts)
	if cfg.minProcs < 0 {
		return nil, &comm.ArgError{Op: core.OpInit, Arg: "min GOMAXPROCS", Value: cfg.minProcs, Err: comm.ErrInvalidSize, Reason: "negative"}
	}
	p, err := acquireMPI(ctx)
	if err != nil {
		return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: -1, GlobalRank: -1, Err: err}
	}
	world, err := mpi.CommWorld()
	if err == nil {
		c, err := p.newCommunicator(cfg, &p.mu, func(out *mpi.Comm) error { return mpi.CommDup(world, out) })
		if err == nil {
			raiseProcs(cfg)
			c.startRecorder()
			return c, nil
		}
	}
	p.release(cfg)
	return nil, &comm.OpError{Op: core.OpInit, Bytes: -1, Rank: -1, GlobalRank: -1, Err: err}
}

// WithMinGOMAXPROCS makes NewMPI raise the process's GOMAXPROCS to n when it is lower,
// logging the change (slog, Info: from, to, and the CPUs the process may run on); 0, the
// default, leaves GOMAXPROCS alone, and a negative n fails NewMPI with ErrInvalidSize.
// It changes a process-wide setting (and, as any runtime.GOMAXPROCS call, ends Go's
// automatic updates of it from the CPU limit), so it is never the default.
//
// Why 2: mpirun binds every rank to one core by default (--bind-to core for up to two
// ranks, socket above), and Go sets GOMAXPROCS to the number of CPUs the process may
// use, 1. MPI's collectives are blocking C calls, and with one P Go's sysmon takes the P
// from every call that it finds running across two of its ticks (20 µs and more),
// because no other P is idle (runtime/proc.go, retake), hands it to a newly woken thread
// (handoffp) and keeps waking every 20 µs while it keeps doing so: two more threads on
// the rank's one core, taking turns with MPI's busy polling. With GOMAXPROCS 2 one P is
// idle, sysmon leaves a call its P for 10 ms and soon sleeps for as long.
// BenchmarkMPIRankAllReduceOverhead measures both settings: on the project's 2-core
// machine (loaded), 2 ranks, AllReduce of 64 KiB costs 0.94-1.60x (median 1.26) the same
// calls in a C loop with GOMAXPROCS 1, and 0.97-1.03x (median 1.03) with 2. Setting
// GOMAXPROCS in the environment (mpirun -x GOMAXPROCS=2) has the same effect.
func WithMinGOMAXPROCS(n int) Option { return func(o *options) { o.minProcs = n } }

// raiseProcs applies WithMinGOMAXPROCS and says so at Debug (an option doing what it was
// asked for is no news at Info on every rank); without it, it says (Debug) when
// GOMAXPROCS is 1.
func raiseProcs(cfg options) {
	if cfg.minProcs == 0 {
		if runtime.GOMAXPROCS(0) == 1 {
			cfg.log.Debug("comm: GOMAXPROCS is 1 (mpirun bound the rank to one core?): mpi calls longer than 20 µs lose their P to Go's sysmon; WithMinGOMAXPROCS(2) or GOMAXPROCS=2 avoids it", "cpus", runtime.NumCPU())
		}
		return
	}
	if old := runtime.GOMAXPROCS(0); old < cfg.minProcs {
		runtime.GOMAXPROCS(cfg.minProcs)
		cfg.log.Debug("comm: raised GOMAXPROCS so that mpi's blocking calls keep their P", "from", old, "to", cfg.minProcs, "cpus", runtime.NumCPU())
	}
}

// acquireMPI initialises MPI once per process and counts one more user of it.
func acquireMPI(ctx context.Context) (*mpiProcess, error) {
	mpiMu.Lock()
	defer mpiMu.Unlock()
	if mpiProc != nil {
		if mpiProc.finalized.Load() {
			return nil, errors.New("mpi was finalized in this process (an MPI process initialises MPI once)")
		}
		mpiProc.refs++
		return mpiProc, nil
	}
	if err := mpi.Load(); err != nil {
		return nil, fmt.Errorf("load open mpi (apt-get install openmpi-bin libopenmpi-dev): %w", err)
	}
	p := &mpiProcess{main: make(chan func())}
	var flag int32
	if err := mpi.Finalized(&flag); err != nil {
		return nil, err
	}
	if flag != 0 {
		return nil, errors.New("mpi was finalized in this process by its owner")
	}
	if err := mpi.Initialized(&flag); err != nil {
		return nil, err
	}
	if flag == 0 {
		go p.mainThread()
		done := make(chan error, 1)
		var provided int32
		p.main <- func() { done <- mpi.InitThread(nil, nil, mpi.ThreadMultiple, &provided) }
		select {
		case err := <-done:
			if err != nil {
				close(p.main)
				return nil, fmt.Errorf("mpi_init_thread: %w", err)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("mpi_init_thread did not return: %w", context.Cause(ctx))
		}
		p.owner = true
		if provided < mpi.ThreadSerialized {
			return nil, fmt.Errorf("mpi provides thread level %d, comm needs MPI_THREAD_SERIALIZED (%d)", provided, mpi.ThreadSerialized)
		}
		p.multiple = provided >= mpi.ThreadMultiple
	} else {
		var provided int32
		if err := mpi.QueryThread(&provided); err != nil {
			return nil, err
		}
		if provided < mpi.ThreadSerialized {
			return nil, fmt.Errorf("mpi was initialised with thread level %d; comm needs MPI_THREAD_SERIALIZED (%d) or more", provided, mpi.ThreadSerialized)
		}
		p.multiple = provided >= mpi.ThreadMultiple
	}
	if err := p.handles(); err != nil {
		return nil, err
	}
	p.refs = 1
	mpiProc = p
	return p, nil
}

// mainThread runs MPI_Init_thread and MPI_Finalize on one locked OS thread.
func (p *mpiProcess) mainThread() {
	runtime.LockOSThread()
	for f := range p.main {
		f()
	}
}

// handles resolves the datatype and operator handles and creates the user operators.
func (p *mpiProcess) handles() error {
	var errs []error
	dt := func(f func() (mpi.Datatype, error)) mpi.Datatype {
		h, err := f()
		errs = append(errs, err)
		return h
	}
	p.types = [len(core.DtypeInfo)]mpi.Datatype{
		comm.Int8: dt(mpi.Int8T), comm.Uint8: dt(mpi.Uint8T), comm.Int32: dt(mpi.Int32T), comm.Uint32: dt(mpi.Uint32T),
		comm.Int64: dt(mpi.Int64T), comm.Uint64: dt(mpi.Uint64T), comm.Float32: dt(mpi.Float), comm.Float64: dt(mpi.Double),
		comm.Float16: dt(mpi.Uint16T), comm.BFloat16: dt(mpi.Uint16T), comm.Float8E4M3: dt(mpi.Uint8T), comm.Float8E5M2: dt(mpi.Uint8T),
	}
	op := func(f func() (mpi.Op, error)) mpi.Op {
		h, err := f()
		errs = append(errs, err)
		return h
	}
	native := [4]mpi.Op{op(mpi.Sum), op(mpi.Prod), op(mpi.Max), op(mpi.Min)}
	for t := range core.DtypeInfo {
		if f, narrow := narrowFormat(comm.DType(t)); narrow {
			for o := range 4 {
				var h mpi.Op
				errs = append(errs, mpi.OpCreate(mpi.UserFunction(mpiNarrowOp(f, o)), 1, &h))
				p.ops[t][o] = h
				p.userOps = append(p.userOps, h)
			}
			continue
		}
		p.ops[t] = native
		dt := comm.DType(t)
		for o := range 4 {
			if fn := mpiWideOp(dt.Size(), dt == comm.Float32 || dt == comm.Float64, o); fn != 0 {
				var h mpi.Op
				errs = append(errs, mpi.OpCreate(mpi.UserFunction(fn), 1, &h))
				p.ops[t][o] = h
				p.userOps = append(p.userOps, h)
			}
		}
	}
	var flag int32
	var ub *int32 // MPI_TAG_UB's value is a pointer to the bound
	world, err := mpi.CommWorld()
	errs = append(errs, err)
	if err == nil {
		errs = append(errs, mpi.CommGetAttr(world, mpi.TagUb, unsafe.Pointer(&ub), &flag))
	}
	p.tagUB = 32767 // the standard's minimum
	if flag != 0 && ub != nil {
		p.tagUB = int(*ub)
	}
	return errors.Join(errs...)
}

// newCommunicator makes a communicator from the handle create gives (MPI_Comm_dup or
// MPI_Comm_split), with MPI_ERRORS_RETURN, holding parent: the lock of the communicator
// create calls MPI on. It returns (nil, nil) for MPI_COMM_NULL.
func (p *mpiProcess) newCommunicator(cfg options, parent *sync.Mutex, create func(*mpi.Comm) error) (*Communicator, error) {
	parent.Lock()
	defer parent.Unlock()
	var h mpi.Comm
	if err := create(&h); err != nil {
		return nil, err
	}
	null, err := mpi.CommNull()
	if err != nil {
		return nil, err
	}
	if h == null {
		return nil, nil
	}
	eh, err := mpi.ErrorsReturn()
	if err == nil {
		err = mpi.CommSetErrhandler(h, eh)
	}
	var rank, size int32
	if err == nil {
		err = errors.Join(mpi.CommRank(h, &rank), mpi.CommSize(h, &size))
	}
	if err != nil {
		_ = mpi.CommFree(&h)
		return nil, err
	}
	mu := &p.mu
	if p.multiple {
		mu = new(sync.Mutex)
	}
	g := core.NewGuard(int(rank), int(size), comm.BFloat16)
	g.OnlyOps = mpiOps
	return &Communicator{g: g, p: p, cfg: cfg, comm: h, mu: mu,
		rank: int(rank), world: int(size), reqs: make([]mpi.Request, 0, 16)}, nil
}

// release drops one user of MPI; the last one frees the user operators and, if comm
// initialised MPI, finalises it (otherwise MPI stays initialised for the application).
func (p *mpiProcess) release(cfg options) {
	mpiMu.Lock()
	defer mpiMu.Unlock()
	p.refs--
	if p.refs > 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.userOps {
		if err := mpi.OpFree(&p.userOps[i]); err != nil {
			cfg.log.Warn("comm: mpi_op_free failed", "err", err)
		}
	}
	p.userOps = nil
	if !p.owner {
		mpiProc = nil // MPI stays the application's; a later NewMPI sets up again
		return
	}
	done := make(chan error, 1)
	p.main <- func() { done <- mpi.Finalize() }
	if err := <-done; err != nil {
		cfg.log.Error("comm: mpi_finalize failed", "err", err)
	}
	close(p.main)
	p.finalized.Store(true)
}

// hostPtr is the host address a DevicePtr carries, as C wants it.
func hostPtr(p comm.DevicePtr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// Rank is this rank's index in the communicator.
func (c *Communicator) Rank() int { return c.rank }

// WorldSize is the number of ranks of the communicator.
func (c *Communicator) WorldSize() int { return c.world }

// MPICalls is the number of MPI calls the communicator has made (for diagnostics and
// for tests proving that bad input never reaches MPI).
func (c *Communicator) MPICalls() int64 {
	if c.mu == nil { // the zero Communicator
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// lock takes the process lock for an MPI call, failing when MPI was finalised. It is
// small enough to be inlined; the failure is finalizedErr.
func (c *Communicator) lock(op string) error {
	c.mu.Lock()
	if c.p.finalized.Load() {
		return c.finalizedErr(op)
	}
	c.calls++
	return nil
}

// finalizedErr releases the process lock lock took and says that MPI was finalised.
func (c *Communicator) finalizedErr(op string) error {
	c.mu.Unlock()
	return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "rank", Value: c.rank, Err: comm.ErrClosed, Reason: "mpi was finalized"}
}

// Yielding: the goroutine making blocking MPI calls yields (runtime.Gosched) after one
// of them when mpiYieldEvery has passed since the last yield, so that Go's scheduler
// sees it scheduled. Without that, a goroutine that spends nearly all its time in MPI
// calls is never scheduled anew (Go does not preempt a goroutine in a cgo call,
// runtime/proc.go preemptone), and once 10 ms (forcePreemptNS) have passed since its
// last scheduling, sysmon takes its P away from every call it finds running, every time
// it looks, and keeps looking every 20 µs: on an mpirun rank bound to one core, that is
// sysmon and a freshly woken thread taking turns with MPI's busy polling for as long as
// the loop of calls lasts (in BenchmarkMPIRankAllReduceOverhead's 64 KiB rows before
// the yields, 15% of the calls lost their P at GOMAXPROCS 1 and 23% at 2; its doc
// comment has the details). A yield costs about a microsecond every 2 ms. The clock
// is read after every 32nd call, and after every call of mpiAlwaysTimed bytes or more
// (32 of those may take longer than 10 ms).
const (
	mpiYieldEvery  = 2 * time.Millisecond
	mpiAlwaysTimed = 1 << 20
)

// unlockBlocking releases the process lock after a blocking MPI call moving bytes, and
// yields when it is due (see mpiYieldEvery). It is small enough to be inlined: the calls
// that read the clock take unlockTimed.
func (c *Communicator) unlockBlocking(bytes int) {
	c.recorded()
	if c.calls&31 != 0 && bytes < mpiAlwaysTimed {
		c.mu.Unlock()
		return
	}
	c.unlockTimed()
}

// unlockTimed is unlockBlocking after a call that reads the clock.
func (c *Communicator) unlockTimed() {
	yield := false
	if now := time.Now(); now.Sub(c.yielded) >= mpiYieldEvery {
		// Under contention a yield queues the goroutine behind every runnable one, and
		// sysmon has other goroutines to give the P to anyway (see progress.go).
		busy := runnableGoroutines() > 0
		c.contended.Store(busy)
		c.yielded, yield = now, !busy
	}
	c.mu.Unlock()
	if yield {
		runtime.Gosched()
	}
}

func (c *Communicator) opErr(op string, bytes int, err error) error {
	if err == nil {
		return nil
	}
	return &comm.OpError{Op: op, Bytes: bytes, Rank: c.rank, GlobalRank: c.rank, Err: err}
}

func checkMPICount(op, arg string, n int) error {
	if n > math.MaxInt32 {
		return &comm.ArgError{Op: op, Arg: arg, Value: n, Err: comm.ErrInvalidSize, Reason: "above MPI's int count (2^31-1)"}
	}
	return nil
}

// AllReduce reduces count elements at ptr across ranks with op, in place (MPI_Allreduce
// with MPI_IN_PLACE); it has completed when it returns.
func (c *Communicator) AllReduce(ptr comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	// The valid case passes in one test (typedReduceValid); anything else takes the
	// checks one by one (allReduceChecks), which say what failed.
	bytes, ok := c.g.TypedReduceValid(ptr, count, t, op)
	if !ok {
		var err error
		if bytes, err = c.allReduceChecks(ptr, count, t, op); err != nil {
			return err
		}
	}
	if err := c.lockChecked(core.OpAllReduce, count, t, -1, op, false); err != nil {
		return err
	}
	c.record(flightrec.AllReduce, count, t, 0)
	var err error
	if op == comm.Avg {
		err = c.allReduceAvg(ptr, count, t)
	} else {
		// No defer on this path: it is the call BenchmarkMPIRankAllReduceOverhead times, and
		// nothing between Lock and Unlock can panic.
		err = c.allreduce(mpi.InPlace, addr(ptr), count, c.p.types[t], c.p.ops[t][op])
	}
	c.unlockBlocking(bytes)
	return c.opErr(core.OpAllReduce, bytes, err)
}

// allReduceChecks is AllReduce's argument checks in order, each with its own error; it
// returns the size in bytes.
func (c *Communicator) allReduceChecks(ptr comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) (int, error) {
	bytes, err := c.g.TypedReduce(ptr, count, t, op)
	if err != nil {
		return 0, err
	}
	return bytes, checkMPICount(core.OpAllReduce, "count", count)
}

// allReduceAvg is AllReduce with Avg, under the process lock: NCCL's average composed
// from a pre-multiplied (or, for integers, divided) Sum.
func (c *Communicator) allReduceAvg(ptr comm.DevicePtr, count int, t comm.DType) error {
	c.premultiply(hostPtr(ptr), hostPtr(ptr), count, t)
	err := c.allreduce(mpi.InPlace, addr(ptr), count, c.p.types[t], c.p.ops[t][comm.Sum])
	if err == nil {
		c.divide(hostPtr(ptr), count, t)
	}
	return err
}

// ReduceScatter reduces count*WorldSize() elements at send across ranks and leaves block
// Rank() at recv (MPI_Reduce_scatter_block); recv == send + Rank()*count elements is the
// in-place form. It has completed when it returns.
func (c *Communicator) ReduceScatter(send, recv comm.DevicePtr, count int, t comm.DType, op comm.ReduceOp) error {
	bytes, err := c.g.TypedGather(core.OpReduceScatter, send, recv, count, t, op, true)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpReduceScatter, "count", count*c.world); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpReduceScatter, count, t, -1, op, false); err != nil {
		return err
	}
	c.record(flightrec.ReduceScatter, count, t, 0)
	defer c.unlockBlocking(bytes)
	total := bytes * c.world
	mop := op
	if op == comm.Avg {
		mop = comm.Sum
	}
	inPlace := recv == send+comm.DevicePtr(c.rank*bytes)
	switch {
	case op == comm.Avg || inPlace:
		// The send buffer is an input: reduce a copy (pre-multiplied for Avg), in place.
		if cap(c.tmp) < total {
			c.tmp = make([]byte, total)
		}
		tmp := c.tmp[:max(total, 1)]
		copy(tmp, unsafe.Slice((*byte)(hostPtr(send)), total))
		if op == comm.Avg {
			c.premultiply(unsafe.Pointer(&tmp[0]), unsafe.Pointer(&tmp[0]), count*c.world, t)
		}
		err = c.reduceScatterBlock(mpi.InPlace, uintptr(unsafe.Pointer(&tmp[0])), count, c.p.types[t], c.p.ops[t][mop])
		if err == nil {
			copy(unsafe.Slice((*byte)(hostPtr(recv)), bytes), tmp[:bytes])
		}
	default:
		err = c.reduceScatterBlock(addr(send), addr(recv), count, c.p.types[t], c.p.ops[t][mop])
	}
	if err == nil && op == comm.Avg {
		c.divide(hostPtr(recv), count, t)
	}
	return c.opErr(core.OpReduceScatter, bytes, err)
}

// Broadcast copies count elements at ptr on root to every rank (MPI_Bcast); it has
// completed when it returns.
func (c *Communicator) Broadcast(ptr comm.DevicePtr, count int, t comm.DType, root int) error {
	bytes, err := c.g.TypedBroadcast(ptr, count, t, root)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpBroadcast, "bytes", bytes); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpBroadcast, count, t, root, 0, true); err != nil {
		return err
	}
	c.record(flightrec.Broadcast, count, t, 0)
	defer c.unlockBlocking(bytes)
	return c.opErr(core.OpBroadcast, bytes, c.bcast(addr(ptr), bytes, root))
}

// AllGather gathers count elements from every rank into recv in rank order
// (MPI_Allgather of bytes; send == recv + Rank()*count elements is the in-place form). It
// has completed when it returns.
func (c *Communicator) AllGather(send, recv comm.DevicePtr, count int, t comm.DType) error {
	bytes, err := c.g.TypedGather(core.OpAllGather, send, recv, count, t, comm.Sum, false)
	if err != nil {
		return err
	}
	if err := checkMPICount(core.OpAllGather, "bytes", bytes*c.world); err != nil {
		return err
	}
	if err := c.lockChecked(core.OpAllGather, count, t, -1, 0, true); err != nil {
		return err
	}
	c.record(flightrec.AllGather, count, t, 0)
	defer c.unlockBlocking(bytes)
	in := addr(send)
	if send == recv+comm.DevicePtr(c.rank*bytes) {
		in = mpi.InPlace
	}
	return c.opErr(core.OpAllGather, bytes, c.byteCall(callAllgather, in, bytes, addr(recv), -1))
}

// Send posts a send of count elements at ptr to dest with tag (MPI_Isend); it completes
// in Sync, Barrier or Close, and the buffer must stay untouched until then. A tag above
// the library's MPI_TAG_UB fails with ErrUnsupported.
func (c *Communicator) Send(ptr comm.DevicePtr, count int, t comm.DType, dest int, tag uint32) error {
	return c.p2p(core.OpSend, "dest", ptr, count, t, dest, tag, true)
}

// Recv posts a receive of count elements into ptr from src with tag (MPI_Irecv); the
// data is there after Sync, Barrier or Close.
func (c *Communicator) Recv(ptr comm.DevicePtr, count int, t comm.DType, src int, tag uint32) error {
	return c.p2p(core.OpRecv, "src", ptr, count, t, src, tag, false)
}

func (c *Communicator) p2p(op, peerArg string, ptr comm.DevicePtr, count int, t comm.DType, peer int, tag uint32, send bool) error {
	bytes, err := c.g.TypedP2P(op, peerArg, ptr, count, t, peer)
	if err != nil {
		return err
	}
	if err := checkMPICount(op, "bytes", bytes); err != nil {
		return err
	}
	if int64(tag) > int64(c.p.tagUB) {
		return &comm.ArgError{Rank: c.rank, HasRank: true, Op: op, Arg: "tag", Value: tag, Err: comm.ErrUnsupported,
			Reason: fmt.Sprintf("above the library's MPI_TAG_UB (%d)", c.p.tagUB)}
	}
	if err := c.lock(op); err != nil {
		return err
	}
	c.record(p2pOp(send), count, t, peer)
	defer c.mu.Unlock()
	var req mpi.Request
	if send {
		err = mpi.Isend(hostPtr(ptr), int32(bytes), c.p.types[comm.Uint8], int32(peer), int32(tag), c.comm, &req)
	} else {
		err = mpi.Irecv(hostPtr(ptr), int32(bytes), c.p.types[comm.Uint8], int32(peer), int32(tag), c.comm, &req)
	}
	if err != nil {
		return c.opErr(op, bytes, err)
	}
	c.reqs = append(c.reqs, req)
	c.posted = append(c.posted, posted{op: op, peer: peer, tag: tag, bytes: bytes})
	return nil
}

// posted describes a pending request, for the error that its status may report.
type posted struct {
	op    string
	peer  int
	tag   uint32
	bytes int
}

func (r posted) String() string {
	if r.op == core.OpBarrier {
		return "barrier"
	}
	dir := "to"
	if r.op == core.OpRecv {
		dir = "from"
	}
	return fmt.Sprintf("%s of %d bytes %s rank %d with tag %d", r.op, r.bytes, dir, r.peer, r.tag)
}

// statusErr turns MPI_ERR_IN_STATUS from Testall into the errors of the requests that
// failed, read from their statuses: which request, and MPI's error.
func (c *Communicator) statusErr(err error) error {
	var code mpi.ErrorCode
	if !errors.As(err, &code) || code != mpi.ErrInStatus {
		return err
	}
	var errs []error
	for i, st := range c.stats[:len(c.reqs)] {
		if st.MpiError != mpi.Success && st.MpiError != mpi.ErrPending {
			errs = append(errs, fmt.Errorf("%v (request %d of %d): %w", c.posted[i], i+1, len(c.reqs), mpi.ErrorCode(st.MpiError)))
		}
	}
	if len(errs) == 0 {
		return err
	}
	return errors.Join(errs...)
}

// GroupStart opens a group. Point-to-point operations are non-blocking anyway, so a
// group changes no semantics here; it only nests (Sync, Barrier and Split inside one
// fail with ErrGroupOpen, as on NCCL).
func (c *Communicator) GroupStart() error { return c.g.GroupStart() }

// GroupEnd closes the group GroupStart opened.
func (c *Communicator) GroupEnd() error {
	_, err := c.g.GroupEnd()
	return err
}

// Sync waits until every posted Send and Recv has completed, polling MPI_Testall as
// long as ctx allows.
func (c *Communicator) Sync(ctx context.Context) error {
	if err := c.g.OutsideGroup(core.OpSync); err != nil {
		return err
	}
	return c.wait(ctx, core.OpSync)
}

// Waiting: Sync, Barrier and Close poll MPI_Testall (MPI cannot be interrupted while
// blocked in MPI_Waitall, and ctx must be honoured); while goroutines wait for a P, the
// progress thread polls for them (waitOffloaded). Otherwise they poll back to back for
// mpiSpinFor, which covers ranks arriving close together, then sleep between polls,
// from mpiNapMin doubling to mpiNapMax. A sleeping goroutine is woken by its timer
// ahead of the goroutines waiting in the run queue, so a wait costs at most a
// scheduling slice of another goroutine per nap however many are runnable
// (runtime.Gosched instead queued the waiter behind all of them:
// TestMPIWaitDoesNotStarve). But a goroutine woken so runs in what is left of the slice
// it took over: if it spins, Go's sysmon preempts it within microseconds and it joins
// the global run queue, behind all of them again. So once a nap has taken a slice
// longer than asked (mpiContended: other goroutines hold the P), waits nap from their
// first poll, until a nap returns on time. Every nap is followed by mpiPollsAfterNap
// polls back to back: with Open MPI, a barrier whose last message arrived during a nap
// usually completes only at the second MPI_Testall after it, and under contention each
// further nap costs another slice (TestMPIWaitDoesNotStarve's late barriers took two
// naps each with one poll, one nap with three).
const (
	mpiPollsAfterNap = 3
	mpiSpinFor       = 200 * time.Microsecond
	mpiNapMin        = 20 * time.Microsecond
	mpiNapMax        = time.Millisecond
	// mpiContended is how much longer than asked a nap must take to say that other
	// goroutines hold the Ps (a scheduling slice is 10 ms).
	mpiContended = 3 * time.Millisecond
)

func (c *Communicator) wait(ctx context.Context, op string) error {
	// Whether goroutines wait for a P decides how this wait and the blocking calls after
	// it go (see progress.go); reading it costs about a microsecond.
	c.contended.Store(runnableGoroutines() > 0)
	if c.contended.Load() {
		// Not even a first poll here: with mpirun --oversubscribe, an MPI_Testall that
		// completes nothing yields the thread (sched_yield) inside the cgo call, which
		// sysmon sees as a blocking call and hands the P to a busy goroutine.
		if done, err := c.waitOffloaded(ctx, op); done {
			return err
		}
	}
	var start time.Time
	nap := time.Duration(0)
	again := 0 // polls left before the next nap
	for {
		if err := c.lock(op); err != nil {
			return err
		}
		if len(c.reqs) == 0 {
			c.unpinAll()
			c.mu.Unlock()
			return nil
		}
		var flag int32
		if len(c.stats) < len(c.reqs) {
			c.stats = make([]mpi.Status, cap(c.reqs))
		}
		err := mpi.Testall(int32(len(c.reqs)), &c.reqs[0], &flag, &c.stats[0])
		err = c.tested(flag, err)
		c.mu.Unlock()
		switch {
		case err != nil:
			return c.opErr(op, -1, err)
		case flag != 0:
			return nil
		case ctx.Err() != nil:
			return &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.rank, Err: context.Cause(ctx)}
		}
		switch {
		case start.IsZero():
			start = time.Now()
			if c.contended.Load() {
				nap = mpiNapMin
			}
		case again > 0:
			again--
		case nap > 0 && c.contended.Load():
			if done, err := c.waitOffloaded(ctx, op); done {
				return err
			}
			fallthrough // no progress thread
		case nap > 0:
			again = mpiPollsAfterNap - 1
			before := time.Now()
			if c.contended.Load() {
				lockedNap(nap) // a slice of its own once woken (progress.go)
			} else {
				time.Sleep(nap) // no thread handoffs when no goroutine waits for a P
			}
			c.contended.Store(time.Since(before) > nap+mpiContended || runnableGoroutines() > 0)
			nap = min(2*nap, mpiNapMax)
		case time.Since(start) >= mpiSpinFor:
			nap = mpiNapMin
		}
	}
}

// tested ends the pending requests once MPI_Testall has said flag (all complete) or err;
// the caller holds c.mu.
func (c *Communicator) tested(flag int32, err error) error {
	if err != nil {
		err = c.statusErr(err)
	}
	if flag != 0 || err != nil {
		c.reqs, c.posted = c.reqs[:0], c.posted[:0]
		c.unpinAll()
	}
	return err
}

// waitOffloaded is the rest of wait while goroutines wait for a P: the progress thread
// polls MPI_Testall back to back, as MPI_Waitall would, and the goroutine naps until
// it is done or ctx ends. It holds the communicator meanwhile, as a blocking collective
// does. done is false when there is no progress thread (wait then goes on polling).
func (c *Communicator) waitOffloaded(ctx context.Context, op string) (done bool, err error) {
	if err := c.lock(op); err != nil {
		return true, err
	}
	defer c.mu.Unlock()
	if len(c.reqs) == 0 {
		c.unpinAll()
		return true, nil
	}
	if len(c.stats) < len(c.reqs) {
		c.stats = make([]mpi.Status, cap(c.reqs))
	}
	ran, flag, err := c.testallOffloaded(ctx)
	if !ran {
		return false, nil
	}
	switch err := c.tested(flag, err); {
	case err != nil:
		return true, c.opErr(op, -1, err)
	case flag != 0:
		return true, nil
	}
	return true, &comm.OpError{Op: op, Bytes: -1, Rank: c.rank, GlobalRank: c.rank, Err: context.Cause(ctx)}
}

// Barrier completes what Sync completes, then waits until every rank has reached it
// (MPI_Ibarrier, polled as long as ctx allows; if ctx ends first, the barrier stays
// pending and a later Sync completes it).
func (c *Communicator) Barrier(ctx context.Context) error {
	if err := c.g.OutsideGroup(core.OpBarrier); err != nil {
		return err
	}
	if err := c.wait(ctx, core.OpBarrier); err != nil {
		return err
	}
	if err := c.lock(core.OpBarrier); err != nil {
		return err
	}
	var req mpi.Request
	err := mpi.Ibarrier(c.comm, &req)
	if err == nil {
		c.reqs = append(c.reqs, req)
		c.posted = append(c.posted, posted{op: core.OpBarrier})
	}
	c.mu.Unlock()
	if err != nil {
		return c.opErr(core.OpBarrier, -1, err)
	}
	return c.wait(ctx, core.OpBarrier)
}

// Split creates sub-communicators collectively (MPI_Comm_split): ranks passing the same
// color join one, ordered by key and then by rank; a negative color (MPI_UNDEFINED)
// joins none and returns (nil, nil). It blocks until every rank called it; ctx is not
// consulted (MPI cannot cancel it). The child is a *Communicator; the package function
// Split returns it as one.
func (c *Communicator) Split(ctx context.Context, color, key int) (comm.Communicator, error) {
	child, err := Split(ctx, c, color, key)
	if child == nil {
		return nil, err // no typed nil in the interface
	}
	return child, err
}

// Split is Communicator.Split returning the child as a *Communicator (nil for a
// negative color), so that the MPI methods and the typed slice functions take it
// without a type assertion.
func Split(_ context.Context, c *Communicator, color, key int) (*Communicator, error) {
	if err := c.g.OutsideGroup(core.OpSplit); err != nil {
		return nil, err
	}
	if color > math.MaxInt32 {
		return nil, &comm.ArgError{Op: core.OpSplit, Arg: "color", Value: color, Err: comm.ErrInvalidSize, Reason: "above MPI's int"}
	}
	if key > math.MaxInt32 || key < math.MinInt32 {
		return nil, &comm.ArgError{Op: core.OpSplit, Arg: "key", Value: key, Err: comm.ErrInvalidSize, Reason: "outside MPI's int"}
	}
	col := int32(color)
	if color < 0 {
		col = mpi.Undefined
	}
	mpiMu.Lock()
	if c.p.finalized.Load() {
		mpiMu.Unlock()
		return nil, &comm.ArgError{Op: core.OpSplit, Arg: "rank", Value: c.rank, Err: comm.ErrClosed, Reason: "mpi was finalized"}
	}
	c.p.refs++
	mpiMu.Unlock()
	child, err := c.p.newCommunicator(c.cfg, c.mu, func(out *mpi.Comm) error {
		c.calls++ // newCommunicator holds c.mu
		return mpi.CommSplit(c.comm, col, int32(key), out)
	})
	if child == nil {
		c.p.release(c.cfg)
		if err != nil {
			return nil, c.opErr(core.OpSplit, -1, err)
		}
		c.fr.splits++ // a rank without a child counts the split too: names agree
		return nil, nil
	}
	c.fr.splits++
	c.splitRecorder(child, c.fr.splits)
	return child, nil
}

// Close completes pending operations within the close timeout (WithCloseTimeout,
// default 10s), cancels what is still pending, frees the communicator (MPI_Comm_free)
// and, when it is the last communicator of a process whose MPI comm initialised, frees
// the user operators and finalises MPI. Errors are logged and returned; a second Close
// fails with ErrClosed.
func (c *Communicator) Close() error {
	open, err := c.g.Close()
	if err != nil {
		return err
	}
	var errs []error
	if open > 0 {
		errs = append(errs, core.GroupLeftOpen(open))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeWait)
	defer cancel()
	if err := c.wait(ctx, core.OpClose); err != nil {
		errs = append(errs, err)
		c.cancelPending()
	}
	if err := c.lock(core.OpClose); err == nil {
		c.prog.stop()
		h := c.comm // a pointer into c would point at Go pointers
		if err := mpi.CommFree(&h); err != nil {
			errs = append(errs, c.opErr(core.OpClose, -1, err))
		}
		c.mu.Unlock()
		c.p.release(c.cfg)
	} else {
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	if err != nil {
		c.cfg.log.Error("comm: mpi communicator close", "rank", c.rank, "err", err)
	}
	c.closeRecorder(err)
	return err
}

// cancelPending cancels and frees the requests Close could not complete.
func (c *Communicator) cancelPending() {
	if c.lock(core.OpClose) != nil {
		return
	}
	defer c.mu.Unlock()
	for i := range c.reqs {
		_ = mpi.Cancel(&c.reqs[i])
		_ = mpi.RequestFree(&c.reqs[i])
	}
	c.reqs, c.posted = c.reqs[:0], c.posted[:0]
	c.unpinAll()
}

// premultiply writes the Avg contributions of count elements of t at in to out (which
// may be in): floating values times 1/n rounded to the format (NCCL's pre-multiplied
// sum; the fp8 formats scale by 1/n rounded to float16); integers are unchanged.
func (c *Communicator) premultiply(out, in unsafe.Pointer, count int, t comm.DType) {
	n := c.world
	switch t {
	case comm.Float32:
		s := float32(1 / float64(n))
		src, dst := unsafe.Slice((*float32)(in), count), unsafe.Slice((*float32)(out), count)
		for i, v := range src {
			dst[i] = v * s
		}
	case comm.Float64:
		s := 1 / float64(n)
		src, dst := unsafe.Slice((*float64)(in), count), unsafe.Slice((*float64)(out), count)
		for i, v := range src {
			dst[i] = v * s
		}
	case comm.Float16, comm.BFloat16:
		dec, enc := kernels.F16ToFloat32, kernels.Float32ToF16
		if t == comm.BFloat16 {
			dec, enc = kernels.BF16ToFloat32, kernels.Float32ToBF16
		}
		s := dec(enc(float32(1 / float64(n))))
		src, dst := unsafe.Slice((*uint16)(in), count), unsafe.Slice((*uint16)(out), count)
		for i, v := range src {
			dst[i] = enc(dec(v) * s)
		}
	case comm.Float8E4M3, comm.Float8E5M2:
		dec, enc := kernels.E4M3ToFloat32, kernels.Float32ToE4M3
		if t == comm.Float8E5M2 {
			dec, enc = kernels.E5M2ToFloat32, kernels.Float32ToE5M2
		}
		s := kernels.F16ToFloat32(kernels.Float32ToF16(float32(1 / float64(n))))
		src, dst := unsafe.Slice((*uint8)(in), count), unsafe.Slice((*uint8)(out), count)
		for i, v := range src {
			dst[i] = enc(dec(v) * s)
		}
	default:
		if out != in {
			copy(unsafe.Slice((*byte)(out), count*t.Size()), unsafe.Slice((*byte)(in), count*t.Size()))
		}
	}
}

// divide finishes an integer Avg: the sum divided by the number of ranks, truncated.
func (c *Communicator) divide(buf unsafe.Pointer, count int, t comm.DType) {
	switch n := c.world; t {
	case comm.Int8:
		divSigned[int8](buf, count, n)
	case comm.Int32:
		divSigned[int32](buf, count, n)
	case comm.Int64:
		divSigned[int64](buf, count, n)
	case comm.Uint8:
		divUnsigned[uint8](buf, count, n)
	case comm.Uint32:
		divUnsigned[uint32](buf, count, n)
	case comm.Uint64:
		divUnsigned[uint64](buf, count, n)
	}
}

func divSigned[T int8 | int32 | int64](buf unsafe.Pointer, count, n int) {
	s := unsafe.Slice((*T)(buf), count)
	for i, v := range s {
		s[i] = T(int64(v) / int64(n))
	}
}

func divUnsigned[T uint8 | uint32 | uint64](buf unsafe.Pointer, count, n int) {
	s := unsafe.Slice((*T)(buf), count)
	for i, v := range s {
		s[i] = T(uint64(v) / uint64(n))
	}
}
