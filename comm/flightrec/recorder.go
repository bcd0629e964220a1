package flightrec

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sentinel errors.
var (
	// ErrConfig reports a setting (an option or an environment variable) that cannot
	// be used.
	ErrConfig = errors.New("flightrec: bad configuration")
	// ErrFormat reports a dump that is not a flight-recorder dump this package reads.
	ErrFormat = errors.New("flightrec: bad dump")
	// ErrOff reports a dump asked of a recorder that is off (nil or zero entries).
	ErrOff = errors.New("flightrec: recorder is off")
)

// Defaults.
const (
	// DefaultEntries is the ring size per communicator that Config.Entries 0 does not
	// mean: it is what the backends use unless an option or the environment says
	// otherwise.
	DefaultEntries = 512
	// DefaultDumpFile is where dumps go unless configured: the rank is appended
	// (PyTorch's default too).
	DefaultDumpFile = "/tmp/nccl_trace_rank_"
	// DefaultResolution is the period of the recorder's clock (see Config.Resolution).
	DefaultResolution = 10 * time.Millisecond
	// Version is the dump format version written, the one torch 2.14's analyzer
	// checks.
	Version = "2.10"
)

// Environment variables read by ConfigFromEnv. The first set of each list wins.
var (
	// EnvEntries: ring size per communicator (0 turns the recorder off).
	EnvEntries = []string{"NCCLGO_FR_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}
	// EnvDumpFile: the dump's path without the rank (a directory and a file prefix).
	EnvDumpFile = []string{"NCCLGO_FR_DUMP_FILE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}
	// EnvCallSites: "1" records the Go call site of every operation.
	EnvCallSites = []string{"NCCLGO_FR_CALL_SITES"}
)

// Config is a recorder's configuration.
type Config struct {
	// Entries is the number of operations each communicator keeps (its ring); 0 turns
	// the recorder off.
	Entries int
	// DumpFile is the path dumps are written to, without the rank: "<dir>/<prefix>"
	// ("/tmp/nccl_trace_rank_" writes /tmp/nccl_trace_rank_3 on rank 3). Empty means
	// DefaultDumpFile.
	DumpFile string
	// CallSites records the Go call site of every operation (the caller of the
	// backend's exported method), at about 100 ns an operation.
	CallSites bool
	// CallSiteSkip is how many frames above Record the call site is (0: the caller of
	// Record's caller, right for a backend method calling Record directly).
	CallSiteSkip int
	// LibVersion is written as the dump's comm_lib_version ("2.21.5").
	LibVersion string
	// Resolution is the period of the clock the recorder reads its timestamps from
	// (0: DefaultResolution). Reading the system clock for every operation would cost
	// more than the whole record, so a goroutine refreshes a cached time this often
	// while the recorder is open: timestamps are late by at most Resolution.
	Resolution time.Duration
}

// ConfigFromEnv returns the configuration the environment sets, starting from def:
// EnvEntries, EnvDumpFile and EnvCallSites. A value that does not parse is an error
// wrapping ErrConfig naming the variable.
func ConfigFromEnv(def Config) (Config, error) {
	cfg := def
	if name, v, ok := lookup(EnvEntries); ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return def, fmt.Errorf("%w: %s=%q: want a count of entries, 0 or more", ErrConfig, name, v)
		}
		cfg.Entries = n
	}
	if _, v, ok := lookup(EnvDumpFile); ok && v != "" {
		cfg.DumpFile = v
	}
	if name, v, ok := lookup(EnvCallSites); ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return def, fmt.Errorf("%w: %s=%q: want 1 or 0", ErrConfig, name, v)
		}
		cfg.CallSites = b
	}
	return cfg, nil
}

func lookup(names []string) (name, value string, ok bool) {
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			return n, v, true
		}
	}
	return "", "", false
}

// Recorder holds the flight records of one process (one rank): the rings of its
// communicators, a record id shared by all of them (PyTorch's record_id), and where its
// dump goes. A nil *Recorder is off: every method is a no-op and Comm returns nil.
type Recorder struct {
	cfg  Config
	rank int

	now  atomic.Int64 // the cached clock, ns since base (at least 1)
	base time.Time    // wall and monotonic time of now's zero
	// The clock goroutine runs only once a communicator that is not Blocking registers
	// (the NCCL backend, whose records must stay cheap); until then, and for a recorder of
	// blocking communicators only (MPI's, whose calls take microseconds), a record reads
	// the system clock. A goroutine woken every Resolution would otherwise take the run
	// queue's next slot from a rank's waiting goroutine (see comm/mpi's waits).
	ticking atomic.Bool
	closed  atomic.Bool
	start   sync.Once

	// mu guards comms. Each communicator's ring has its own lock (Group.Lock or the
	// ring's), so that a record takes no lock shared with other communicators.
	mu      sync.Mutex
	comms   []*Comm
	records atomic.Uint64 // the record ids given so far, once multi
	// While one communicator is registered, its records take their ids from solo,
	// under its lock: no atomic operation. The second registration moves the count to
	// records, under the first one's lock, and sets multi.
	solo  uint64
	multi atomic.Bool

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// New returns the recorder of the process whose global rank is rank, or nil when
// cfg.Entries is 0 (off). The first communicator that is not Blocking starts the clock
// goroutine; Close stops it.
func New(cfg Config, rank int) (*Recorder, error) {
	if cfg.Entries < 0 {
		return nil, fmt.Errorf("%w: entries %d: want 0 or more", ErrConfig, cfg.Entries)
	}
	if rank < 0 {
		return nil, fmt.Errorf("%w: rank %d: want 0 or more", ErrConfig, rank)
	}
	if cfg.Resolution < 0 {
		return nil, fmt.Errorf("%w: resolution %v: want 0 or more", ErrConfig, cfg.Resolution)
	}
	if cfg.Entries == 0 {
		return nil, nil
	}
	if cfg.DumpFile == "" {
		cfg.DumpFile = DefaultDumpFile
	}
	if cfg.Resolution == 0 {
		cfg.Resolution = DefaultResolution
	}
	r := &Recorder{cfg: cfg, rank: rank, base: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	r.tick()
	return r, nil
}

// tick refreshes the cached clock.
func (r *Recorder) tick() { r.now.Store(int64(time.Since(r.base)) + 1) }

// stamp is the time of a record: the cached clock while the clock goroutine runs (and
// after Close), else the system clock's.
func (r *Recorder) stamp() int64 {
	if r.ticking.Load() { // after Close too: now is then the time of the Close
		return r.now.Load()
	}
	return r.clockTime()
}

// clockTime is stamp without the clock goroutine.
func (r *Recorder) clockTime() int64 {
	if r.closed.Load() {
		return r.now.Load()
	}
	return int64(time.Since(r.base)) + 1
}

// startClock starts the clock goroutine, once, unless Close came first.
func (r *Recorder) startClock() {
	r.start.Do(func() {
		r.tick()
		r.ticking.Store(true)
		go r.clock()
	})
}

func (r *Recorder) clock() {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Resolution)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.tick()
		}
	}
}

// Close stops the clock goroutine. The records stay readable (Dump, WriteFile); later
// operations get the time of the Close. Safe on nil and more than once.
func (r *Recorder) Close() error {
	if r == nil {
		return nil
	}
	r.start.Do(func() { close(r.done) }) // never started: nothing to stop
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	r.tick()
	r.closed.Store(true)
	return nil
}

// Rank is the global rank the recorder was made for.
func (r *Recorder) Rank() int {
	if r == nil {
		return -1
	}
	return r.rank
}

// Config returns the recorder's configuration (the zero Config when off).
func (r *Recorder) Config() Config {
	if r == nil {
		return Config{}
	}
	return r.cfg
}

// Path is the file WriteFile writes: DumpFile followed by the rank.
func (r *Recorder) Path() string {
	if r == nil {
		return ""
	}
	return r.cfg.DumpFile + strconv.Itoa(r.rank)
}

// wall converts a recorder time (ns since base) to Unix nanoseconds.
func (r *Recorder) wall(t int64) int64 { return r.base.UnixNano() + t - 1 }

// Group describes a communicator (PyTorch's process group).
type Group struct {
	// Name identifies the communicator across ranks: every member gives the same
	// name. Communicators with the same name but other ranks (the parts of a split)
	// are told apart by their ranks, as PyTorch's analyzer does.
	Name string
	// Desc says what it is for ("default_pg", "split:tp", ...); empty is "undefined".
	Desc string
	// ID is the communicator's number in this process (PyTorch's pg_id).
	ID int
	// Ranks are the global ranks of its members, in the order of their ranks in it.
	Ranks []int
	// Backend is the library name written before each operation's name ("nccl",
	// "gloo", ...; empty is "nccl"). PyTorch's analyzer accepts nccl, ncclx, xccl,
	// gloo, rccl, rcclx, mccl and hccl only.
	Backend string
	// Timeout is the operation timeout written with each entry.
	Timeout time.Duration
	// Blocking says the communicator's operations return only once complete (MPI's
	// blocking calls): Record then notes the new operation as started and the one
	// before it as completed, so that the backend calls Record alone (one lock). The
	// last operation shows "started" until the next is recorded, or Completed.
	Blocking bool
	// Lock, when set, guards the communicator's ring in place of a lock of its own:
	// the lock a backend already holds while it enqueues an operation. The backend
	// then calls Record and RecordGroup (and LastLocked) while it holds Lock, and they
	// take no lock (a record costs no lock, and, once the recorder has more than one
	// communicator, one atomic addition for the record id); every other method of
	// the ring, a dump, and the registration of the recorder's second communicator
	// take Lock. A dump made while Lock is held waits for it, unless the holder lent
	// the ring (Comm.Lend) for a wait that may be long: a backend that may dump while
	// holding Lock (a failure found inside an enqueued call) dumps on another
	// goroutine. Registering a communicator while holding Lock deadlocks.
	Lock *sync.Mutex
}

// Names must be unique among a process's communicators: the dump keys them by name.

// Comm registers a communicator and returns its ring, or nil when r is nil. Its
// name and ranks are copied.
func (r *Recorder) Comm(g Group) (*Comm, error) {
	if r == nil {
		return nil, nil
	}
	if g.Name == "" {
		return nil, fmt.Errorf("%w: communicator has no name", ErrConfig)
	}
	self := -1
	for i, rk := range g.Ranks {
		if rk < 0 {
			return nil, fmt.Errorf("%w: communicator %q: global rank %d", ErrConfig, g.Name, rk)
		}
		if rk == r.rank {
			self = i
		}
	}
	if self < 0 {
		return nil, fmt.Errorf("%w: communicator %q: ranks %v do not hold this process's rank %d", ErrConfig, g.Name, g.Ranks, r.rank)
	}
	if g.Desc == "" {
		g.Desc = "undefined"
	}
	if g.Backend == "" {
		g.Backend = "nccl"
	}
	g.Ranks = append([]int(nil), g.Ranks...)
	if !g.Blocking {
		r.startClock()
	}
	c := &Comm{r: r, g: g, self: self, ring: make([]entry, r.cfg.Entries), marks: make([]atomic.Uint64, r.cfg.Entries),
		sites: r.cfg.CallSites, skip: r.cfg.CallSiteSkip}
	if c.sites {
		c.pcs = make([]uintptr, r.cfg.Entries)
	}
	c.lastStarted, c.lastCompleted = -1, -1
	if n := len(c.ring); n > 1 && n&(n-1) == 0 {
		c.mask = ID(n - 1)
	}
	c.lk, c.ext = g.Lock, g.Lock != nil
	if !c.ext {
		c.lk = &c.own
	}
	c.plain = c.ext && !c.sites
	c.g.Lock = nil // not the caller's to take through Group()
	r.mu.Lock()
	if len(r.comms) == 1 { // the second: from now on the ids come from records
		first := r.comms[0]
		first.lk.Lock()
		r.records.Store(r.solo)
		r.multi.Store(true)
		first.lk.Unlock()
	}
	r.comms = append(r.comms, c)
	r.mu.Unlock()
	return c, nil
}

// Op is an operation's kind.
type Op uint8

// Operations, with the names PyTorch's analyzer knows.
const (
	AllReduce Op = iota + 1
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	AllToAll
	Gather
	Scatter
	Barrier
	Send
	Recv
	// Coalesced ends a group of operations (written by RecordGroup).
	Coalesced
	// PutSignal is a one-sided put with a signal to Peer; Signal a signal alone;
	// WaitSignal a wait for In signals from Peer. They count as point-to-point.
	PutSignal
	Signal
	WaitSignal
	opEnd
)

var opNames = [...]string{"", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
	"all_to_all", "gather", "scatter", "barrier", "send", "recv", "coalesced", "put_signal", "signal", "wait_signal"}

// String is the operation's name in a dump ("all_reduce").
func (o Op) String() string {
	if o == 0 || o >= opEnd {
		return "op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// IsP2P reports whether the operation is point-to-point (counted apart).
func (o Op) IsP2P() bool { return o == Send || o == Recv || o >= PutSignal && o <= WaitSignal }

// DType is an element type.
type DType uint8

// Element types, named in dumps as PyTorch names them.
const (
	NoType DType = iota
	Int8
	Uint8
	Int32
	Uint32
	Int64
	Uint64
	Float16
	Float32
	Float64
	BFloat16
	Float8E4M3
	Float8E5M2
	dtypeEnd
)

var dtypeNames = [...]string{"", "Char", "Byte", "Int", "UInt32", "Long", "UInt64", "Half", "Float",
	"Double", "BFloat16", "Float8_e4m3fn", "Float8_e5m2"}

// String is the type's name in a dump ("Float").
func (d DType) String() string {
	if d >= dtypeEnd {
		return "dtype(" + strconv.Itoa(int(d)) + ")"
	}
	return dtypeNames[d]
}

// Call is one operation as a backend records it.
type Call struct {
	Op Op
	// Peer is the peer's rank in the communicator, for Send and Recv (the root for
	// rooted collectives is not recorded, as in PyTorch).
	Peer int
	// In and Out are the element counts of the send and receive buffers.
	In, Out int64
	Type    DType
}

// ID names a recorded operation in its communicator's ring; 0 is none (recorder off).
type ID uint64

// state of an entry.
const (
	scheduled uint8 = iota
	started
	completed
)

// entry is one record (88 bytes), written under its ring's lock. Its started time is
// valid once its state is started or completed, its completed time once it is
// completed (a record writes neither).
type entry struct {
	id        ID // 0: empty slot
	record    uint64
	created   int64 // recorder time
	started   int64
	completed int64
	in, out   int64
	collSeq   int64
	p2pSeq    int64
	opID      int64
	peer      int32
	op        Op
	dtype     DType
	state     uint8
}

// Comm is the ring of one communicator. A nil *Comm is off: its methods do nothing.
// All methods are safe for concurrent use.
type Comm struct {
	r     *Recorder
	g     Group
	self  int // this process's rank in the communicator
	sites bool
	skip  int

	lk    *sync.Mutex // Group.Lock, or &own (a concrete mutex: its fast path inlines)
	ext   bool        // lk is Group.Lock
	plain bool        // ext and no call sites: Record takes no lock and reads no call site
	own   sync.Mutex

	mask ID // len(ring)-1 when len(ring) is a power of two above 1, else 0

	ring          []entry   // guarded by lk, as are the fields below
	pcs           []uintptr // each entry's call site, with Config.CallSites
	next          ID        // the last id given
	collSeq       int64
	p2pSeq        int64
	opID          int64
	lastStarted   int64 // collective seq
	lastCompleted int64
	doneThrough   ID // every entry up to it is marked completed

	// marks holds CompletedLater's marks, one per slot of the ring (written without
	// lk; read under it): see CompletedLater.
	marks []atomic.Uint64

	lend atomic.Int32 // ringHeld, ringLent or ringRead (lend.go): Lend's state
}

// Group returns the communicator's description.
func (c *Comm) Group() Group {
	if c == nil {
		return Group{}
	}
	return c.g
}

// Record notes an operation as scheduled (enqueued) and returns its id. A collective
// takes the communicator's next collective sequence number, Send and Recv the next
// point-to-point one. It allocates nothing. On a communicator registered with
// Group.Lock the caller holds that lock (a backend records while it enqueues, under
// it) and Record takes no lock; otherwise it takes the ring's own.
func (c *Comm) Record(call Call) ID {
	if c == nil {
		return 0
	}
	if c.plain { // a backend's hot path: one call
		return c.add(&call, 0, ownSeq)
	}
	return c.recordOwn(&call)
}

// recordOwn is Record with call sites, or on a ring with a lock of its own.
func (c *Comm) recordOwn(call *Call) ID {
	var pc uintptr
	if c.sites {
		pc = c.callSite(c.skip + 1)
	}
	if !c.ext {
		c.own.Lock()
		defer c.own.Unlock()
	}
	return c.record(call, pc)
}

// record is Record with lk held.
func (c *Comm) record(call *Call, pc uintptr) ID { return c.add(call, pc, ownSeq) }

// How add numbers an entry.
const (
	ownSeq   = iota // an operation alone: the next sequence number and op id
	groupSeq        // an operation in a group, whose sequence number is taken: the next op id
	noSeq           // a group's Coalesced entry
)

// blocking notes, on a Blocking communicator, that id started and the operation
// before it completed (at the time CompletedLater noted, else now); lk is held.
func (c *Comm) blocking(id ID) {
	e := &c.ring[c.index(id)]
	if id > 1 {
		if p := &c.ring[c.index(id-1)]; p.id == id-1 {
			at := e.created
			if t, ok := c.markOf(p); ok {
				at = t
			}
			c.set(p, completed, at)
		}
	}
	c.set(e, started, e.created)
}

// RecordGroup notes the operations of one group (ncclGroupStart/End) as scheduled:
// they share one sequence number (point-to-point when all are Send or Recv, collective
// otherwise) and are followed by a Coalesced entry, as PyTorch records a coalesced
// group. It returns the id of the Coalesced entry; Started and Completed on it mark
// the whole group. A group of one operation is recorded as Record records it. Its
// locking is Record's: on a communicator registered with Group.Lock the caller holds
// that lock.
func (c *Comm) RecordGroup(calls []Call) ID {
	if c == nil || len(calls) == 0 {
		return 0
	}
	if c.plain && len(calls) == 1 {
		return c.record(&calls[0], 0)
	}
	var pc uintptr
	if c.sites {
		pc = c.callSite(c.skip)
	}
	if !c.ext {
		c.own.Lock()
		defer c.own.Unlock()
	}
	return c.recordGroup(calls, pc)
}

// recordGroup is RecordGroup with lk held.
func (c *Comm) recordGroup(calls []Call, pc uintptr) ID {
	if len(calls) == 1 {
		return c.record(&calls[0], pc)
	}
	p2p := true
	for i := range calls {
		if !calls[i].Op.IsP2P() {
			p2p = false
		}
	}
	if p2p {
		c.p2pSeq++
	} else {
		c.collSeq++
	}
	for i := range calls {
		c.add(&calls[i], pc, groupSeq)
	}
	end := Call{Op: Coalesced}
	id := c.add(&end, pc, noSeq)
	// The Coalesced entry's peer is the group's size, negative for point-to-point.
	if p2p {
		c.ring[c.index(id)].peer = -int32(len(calls))
	} else {
		c.ring[c.index(id)].peer = int32(len(calls))
	}
	return id
}

// add writes the next entry, numbered as seq says; lk is held. The cost of a record on
// a backend's hot path is this function's. Completions noted by CompletedLater are not
// applied here (a dump and CompletedThrough apply them), except that of the entry that
// leaves the ring.
func (c *Comm) add(call *Call, pc uintptr, seq int) ID {
	switch seq {
	case ownSeq:
		if call.Op.IsP2P() {
			c.p2pSeq++
		} else {
			c.collSeq++
		}
		c.opID++
	case groupSeq:
		c.opID++
	}
	id := c.next + 1
	c.next = id
	s := c.index(id)
	e := &c.ring[s]
	// The entry leaving the ring: when CompletedLater marked it, everything up to it
	// completed.
	if e.id > c.doneThrough {
		if m := c.marks[s].Load(); m != 0 && m&markTagMask == uint64(e.id)&markTagMask {
			c.doneThrough = e.id
			if !e.isP2P() {
				c.lastStarted = max(c.lastStarted, e.collSeq)
				c.lastCompleted = max(c.lastCompleted, e.collSeq)
			}
		}
	}
	var rec uint64
	if c.r.multi.Load() {
		rec = c.r.records.Add(1) - 1
	} else {
		rec = c.r.solo
		c.r.solo++
	}
	// field by field: a composite literal is built on the stack and copied
	e.id, e.record, e.created = id, rec, c.r.stamp()
	e.in, e.out, e.collSeq, e.p2pSeq, e.opID = call.In, call.Out, c.collSeq, c.p2pSeq, c.opID
	e.peer, e.op, e.dtype, e.state = int32(call.Peer), call.Op, call.Type, scheduled
	if c.pcs != nil {
		c.pcs[s] = pc
	}
	if seq == ownSeq && c.g.Blocking {
		c.blocking(id)
	}
	return id
}

func (c *Comm) callSite(skip int) uintptr {
	var pcs [1]uintptr
	// 0 Callers, 1 callSite, 2 Record (or RecordGroup), 3 the backend's method, 4
	// its caller.
	if runtime.Callers(4+skip, pcs[:]) == 0 {
		return 0
	}
	return pcs[0]
}

// index is the position of id (1 or more) in the ring: a mask when the ring's size is
// a power of two (the default), a division otherwise.
func (c *Comm) index(id ID) int {
	if c.mask != 0 {
		return int((id - 1) & c.mask)
	}
	return int((id - 1) % ID(len(c.ring)))
}

// slot returns the live entry of id (nil when it left the ring); lk is held.
func (c *Comm) slot(id ID) *entry {
	if id == 0 || id > c.next {
		return nil
	}
	e := &c.ring[c.index(id)]
	if e.id != id {
		return nil
	}
	return e
}

// Started notes that the operation id (and, for a Coalesced id, its group) started.
func (c *Comm) Started(id ID) {
	if c == nil {
		return
	}
	c.lk.Lock()
	c.mark(id, started)
	c.lk.Unlock()
}

// Completed notes that the operation id (and, for a Coalesced id, its group)
// completed.
func (c *Comm) Completed(id ID) {
	if c == nil {
		return
	}
	c.lk.Lock()
	c.mark(id, completed)
	c.lk.Unlock()
}

// mark sets the state of id and of its group's operations; lk is held.
func (c *Comm) mark(id ID, st uint8) {
	e := c.slot(id)
	if e == nil {
		return
	}
	n := ID(1)
	if e.op == Coalesced {
		n += ID(max(e.peer, -e.peer))
	}
	now := c.r.stamp()
	for i := ID(0); i < n && i < id; i++ {
		if x := c.slot(id - i); x != nil {
			c.set(x, st, now)
		}
	}
}

func (c *Comm) set(e *entry, st uint8, now int64) {
	if st >= started && e.state < started {
		e.started = now
	}
	if st == completed && e.state < completed {
		e.completed = now
	}
	if st > e.state {
		e.state = st
	}
	if e.isP2P() {
		return
	}
	if st >= started && e.collSeq > c.lastStarted {
		c.lastStarted = e.collSeq
	}
	if st == completed && e.collSeq > c.lastCompleted {
		c.lastCompleted = e.collSeq
	}
}

// isP2P reports whether the entry counts as point-to-point: Send, Recv, and the end
// of a group of them (its peer holds minus the group's size).
func (e *entry) isP2P() bool { return e.op.IsP2P() || (e.op == Coalesced && e.peer < 0) }

// CompletedThrough notes that every operation recorded up to and including id
// completed: what a watchdog learns when an event recorded after them completes.
func (c *Comm) CompletedThrough(id ID) {
	if c == nil {
		return
	}
	c.lk.Lock()
	defer c.lk.Unlock()
	c.completedThrough(id)
}

// A mark of CompletedLater is one word, written with one atomic store in the slot of
// its id: the low markTagBits bits of the id (a mark for an id that has left the
// ring, stored late, does not match the entry now in its slot), and above them the
// time of the call in microseconds (rounded up), modulo 2^(64-markTagBits): read back
// relative to its entry's creation, it is exact for an operation that completes less
// than 2^(63-markTagBits) µs (about 100 days) after it was recorded, and a mark older
// than its entry (of an earlier entry in the slot) is refused.
const (
	markTagBits = 20
	markTagMask = 1<<markTagBits - 1
	markTimeMod = 1 << (64 - markTagBits)
)

// micros is t (recorder time) in microseconds, rounded up.
func micros(t int64) uint64 { return uint64(t+999) / 1000 }

// CompletedLater notes that every operation recorded up to and including id
// completed, like CompletedThrough, but without taking the lock: one atomic store of
// the id and the time of the call (to the microsecond), read by a dump (and by
// CompletedThrough, and by the record that reuses the slot) under the lock. It is
// what a backend calls on a hot path after a wait that it does not want to pay a
// second lock for; concurrent calls each keep their own mark.
func (c *Comm) CompletedLater(id ID) {
	if c == nil || id == 0 {
		return
	}
	c.marks[c.index(id)].Store(micros(c.r.stamp())<<markTagBits | uint64(id)&markTagMask)
}

// markOf returns the time CompletedLater noted for e's operation, if it did; lk is
// held.
func (c *Comm) markOf(e *entry) (int64, bool) {
	m := c.marks[c.index(e.id)].Load()
	if m == 0 || m&markTagMask != uint64(e.id)&markTagMask {
		return 0, false
	}
	from := micros(e.created)
	d := (m>>markTagBits - from) % markTimeMod
	if d >= markTimeMod/2 { // before the entry was made: an earlier entry's
		return 0, false
	}
	return int64(from+d) * 1000, true
}

// applyMarks applies CompletedLater's marks to the entries in the ring: each mark
// completes its operation and those before it, each at the time of the earliest mark
// at or after it. lk is held.
func (c *Comm) applyMarks() {
	lo := max(c.doneThrough, c.next-min(c.next, ID(len(c.ring))))
	var through ID
	at := int64(math.MaxInt64)
	for id := c.next; id > lo; id-- {
		e := &c.ring[c.index(id)]
		if t, ok := c.markOf(e); ok {
			through = max(through, id)
			at = min(at, t)
		}
		if through != 0 {
			c.set(e, completed, at)
		}
	}
	c.doneThrough = max(c.doneThrough, through)
}

// completedThrough is CompletedThrough with lk held.
func (c *Comm) completedThrough(id ID) {
	c.applyMarks()
	now := c.r.stamp()
	if id > c.next {
		id = c.next
	}
	from := c.doneThrough + 1
	if lo := c.next - min(c.next, ID(len(c.ring))) + 1; from < lo {
		from = lo
	}
	for i := from; i <= id; i++ {
		if e := c.slot(i); e != nil {
			c.set(e, completed, now)
		}
	}
	if id > c.doneThrough {
		c.doneThrough = id
	}
}

// Last returns the id of the last operation recorded (0 when none): what a watchdog
// notes when it records an event after the operations enqueued so far. A backend that
// set Group.Lock and holds it calls LastLocked instead.
func (c *Comm) Last() ID {
	if c == nil {
		return 0
	}
	c.lk.Lock()
	defer c.lk.Unlock()
	return c.next
}

// LastLocked is Last for a backend that holds Group.Lock. On a communicator
// registered without Group.Lock it is Last.
func (c *Comm) LastLocked() ID {
	if c == nil {
		return 0
	}
	if !c.ext {
		return c.Last()
	}
	return c.next
}
