package nccl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/comm/internal/core"
	"github.com/ncclgo/ncclgo/comm/internal/gpulib"
	"github.com/ncclgo/ncclgo/comm/internal/ncclcfg"
)

// The flight recorder (package flightrec): one Recorder per world communicator (New,
// Connect, Job.NewNCCL), shared by the communicators shrunk or split from it; each
// communicator registers its ring. Operations are recorded when they are enqueued:
// outside a group through frOps (Communicator.direct) and AllReduce's written-out
// path; a group's calls are kept by the group's recorder and recorded when the group
// is launched (threadGroup.flights), each communicator's as one coalesced group, and
// not at all when the group is discarded. A blocking
// operation whose wait ends with the stream drained marks everything recorded up to it
// completed, and so does each event of the watchdog (WithWatchdog) once it completes:
// it notes the last record when it is recorded, under the driver lock that recording
// and enqueueing hold. Nothing marks an operation started: the watchdog's events
// follow batches of operations, and a guessed start would differ between ranks, which
// torch's fr_trace reports as a state mismatch. The first failure (a timeout, an asynchronous error) writes the dump, and
// Close after a failure writes it again.

// WithFlightRecorder sets how many operations the flight recorder keeps per
// communicator; 0 turns it off. The recorder is on by default, with
// flightrec.DefaultEntries (512) entries per communicator, unless the environment sets
// a size (NCCLGO_FR_BUFFER_SIZE, TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE;
// 0 turns it off; the dump's path from NCCLGO_FR_DUMP_FILE, TORCH_FR_DUMP_TEMP_FILE or
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE: see package flightrec). A negative n is the
// default. The option wins over the environment. A failure (a timeout, an
// asynchronous error) writes the dump, by default to /tmp/nccl_trace_rank_<rank>.
// Its cost (BenchmarkFlightRecorderCost, with no allocation): about 9 ns per
// AllReduce on a 2-core AMD EPYC, 1.36 times comm's own cost without it (recorder on
// against off, same run): the ring is written under the lock that enqueueing holds
// (mu), with no lock of its own, the record id takes one atomic addition once the
// process has more than one communicator, and a blocking operation notes its
// completion after its wait with one atomic store (flightrec.Comm.CompletedLater),
// not a second lock. A group is recorded at its launch. A dump takes each
// communicator's mu in turn. Split learns its
// child's members (their global ranks, for the dump) by an all-gather of 8 bytes per
// member on the new child, two small host copies and a wait for them, once per Split:
// on every rank, recorder on or off, so that ranks configured apart (one recording,
// the others not) make the same calls on the child; a driver that cannot copy between
// host and device leaves split children unrecorded.
func WithFlightRecorder(n int) Option {
	return func(c *ncclcfg.Config) {
		if n < 0 {
			n = -1
		}
		c.FlightRec = n
	}
}

// FlightRecorder returns the communicator's flight recorder, nil when it is off: Dump
// and WriteFile write its dump on demand, DumpOnSignal on a signal.
func (c *Communicator) FlightRecorder() *flightrec.Recorder { return c.rec }

// FlightRecorder returns the backend's flight recorder (see
// Communicator.FlightRecorder).
func (b *Backend) FlightRecorder() *flightrec.Recorder { return b.conn().rec }

// startRecorder makes the recorder of a world communicator and registers c. A
// configuration the environment breaks is logged and leaves the recorder off.
func (c *Communicator) startRecorder() {
	// On by default (flightrec.DefaultEntries); the environment, then the option, may
	// turn it off.
	cfg, err := flightrec.ConfigFromEnv(flightrec.Config{Entries: flightrec.DefaultEntries, LibVersion: versionString(c.version)})
	if err != nil {
		c.cfg.Log.Warn("comm: flight recorder off", "rank", c.rank, "err", err)
		return
	}
	if c.cfg.FlightRec >= 0 {
		cfg.Entries = c.cfg.FlightRec
	}
	rec, err := flightrec.New(cfg, c.global)
	if err != nil || rec == nil {
		if err != nil {
			c.cfg.Log.Warn("comm: flight recorder off", "rank", c.rank, "err", err)
		}
		return
	}
	ranks := make([]int, c.world)
	for i := range ranks {
		ranks[i] = i
	}
	name := c.cfg.Name
	if name == "" {
		name = "0" // PyTorch's name for its default process group
	}
	c.rec, c.ownsRec = rec, true
	c.register(name, "default_pg", 0, ranks)
}

// register adds c's ring to its recorder (c.rec) under name, with the global ranks of
// its members in rank order.
func (c *Communicator) register(name, desc string, id int, ranks []int) {
	fc, err := c.rec.Comm(flightrec.Group{Name: name, Desc: desc, ID: id, Ranks: ranks,
		Backend: "nccl", Timeout: c.cfg.Timeout, Lock: &c.mu})
	if err != nil {
		c.cfg.Log.Warn("comm: flight recorder: communicator not recorded", "rank", c.rank, "err", err)
		return
	}
	c.mu.Lock() // the watchdog, already running, reads fr under mu
	c.fr, c.frName, c.frRanks = fc, name, ranks
	c.direct = frOps{d: c.d, fr: fc, n: len(ranks)}
	c.mu.Unlock()
}

// shrunk registers child, shrunk from c without the ranks in exclude (comm ranks of
// c), in c's recorder: its members are c's in order, less the excluded.
func (c *Communicator) shrunk(child *Communicator, exclude []int) {
	if c.fr == nil {
		return
	}
	out := make(map[int]bool, len(exclude))
	for _, r := range exclude {
		out[r] = true
	}
	var ranks []int
	for i, g := range c.frRanks {
		if !out[i] {
			ranks = append(ranks, g)
		}
	}
	n := c.children.Add(1)
	child.rec = c.rec
	child.register(c.frName+":shrink"+strconv.Itoa(int(n)), "shrink", int(n), ranks)
}

// splitRecorder registers child, made by c's n-th Split with color, in c's recorder
// under the name "<c's name>:split<n>:<color>" (alike on every member, distinct from
// its siblings'), with its members' global ranks from an all-gather on the child
// (exchangeRanks). The exchange is made whether or not c records: a rank that records
// and one that does not must make the same calls on the child, or the first
// collective of the one would meet the exchange of the other. It is the child's first
// collective: when it does not complete (a member slow past the operation timeout, or
// dead), the child cannot be relied on and the error is returned for Split to fail
// with. When it completes but a member's part was lost (its host copy failed), the
// child works: that is logged and leaves the child unrecorded (its failures still dump
// the recorder, with the parent's ring).
func (c *Communicator) splitRecorder(ctx context.Context, child *Communicator, n, color int) error {
	hc, ok := c.d.(gpulib.HostCopier)
	if !ok {
		return nil // no rank exchanges: the driver is the same program's on every rank
	}
	ranks, lost, err := child.exchangeRanks(ctx, hc)
	switch {
	case err != nil:
		return fmt.Errorf("exchange of the members' ranks on the new communicator: %w", err)
	case lost != nil && c.fr != nil:
		c.cfg.Log.Warn("comm: flight recorder: split child not recorded", "rank", c.rank, "color", color, "err", lost)
	case lost != nil:
		c.cfg.Log.Debug("comm: split: members not learnt", "rank", c.rank, "color", color, "err", lost)
	case c.fr != nil:
		child.register(c.frName+":split"+strconv.Itoa(n)+":"+strconv.Itoa(color), "split", n, ranks)
	}
	return nil
}

// scratchBytes is the size of the scratch buffer: 8 bytes, and room for
// exchangeRanks's all-gather (8 bytes a member), or the collective check's
// (core.SigBytes a member, collcheck.go) when it is on.
func (c *Communicator) scratchBytes() uint64 {
	if c.checking() {
		return core.SigBytes * uint64(c.world+1)
	}
	return 8 * uint64(c.world+1)
}

// exchangeRanks returns the global rank of every member of c, in c's rank order: an
// all-gather of two int32 per member through the scratch buffer, the global rank and
// its complement, so that the part of a member whose host copy failed (it takes part
// all the same, lest the others wait) is refused by every member alike. err says the
// all-gather did not complete; lost, that it did but some member's part is unknown.
func (c *Communicator) exchangeRanks(ctx context.Context, hc gpulib.HostCopier) (ranks []int, lost, err error) {
	var mine [8]byte
	binary.LittleEndian.PutUint32(mine[:4], uint32(c.global))
	binary.LittleEndian.PutUint32(mine[4:], ^uint32(c.global))
	c.mu.Lock()
	errIn := hc.MemcpyHtoDAsync(c.scratch, mine[:], c.stream)
	c.mu.Unlock()
	if err := c.AllGather(comm.DevicePtr(c.scratch), comm.DevicePtr(c.scratch+8), 2, comm.Int32); err != nil {
		return nil, nil, errors.Join(errIn, err)
	}
	all := make([]byte, 8*c.world)
	c.mu.Lock()
	errOut := hc.MemcpyDtoHAsync(all, c.scratch+8, c.stream)
	c.mu.Unlock()
	if err := c.Sync(ctx); err != nil {
		return nil, nil, errors.Join(errIn, errOut, err)
	}
	if err := errors.Join(errIn, errOut); err != nil {
		return nil, err, nil
	}
	ranks = make([]int, c.world)
	seen := make(map[int]bool, c.world)
	for i := range ranks {
		g, check := binary.LittleEndian.Uint32(all[8*i:]), binary.LittleEndian.Uint32(all[8*i+4:])
		r := int(int32(g))
		if check != ^g || r < 0 || seen[r] {
			return nil, fmt.Errorf("member %d sent no valid global rank", i), nil
		}
		seen[r], ranks[i] = true, r
	}
	if ranks[c.rank] != c.global {
		return nil, fmt.Errorf("member %d (this rank) has global rank %d, not %d", c.rank, ranks[c.rank], c.global), nil
	}
	return ranks, nil, nil
}

// dumpWait bounds dump's wait for the dump to be written: the rings' lock is each
// communicator's mu, which a failing goroutine may hold (a settle inside an enqueued
// call), and the dump completes only once it is released.
const dumpWait = time.Second

// dump writes the recorder's dump after a failure (why says which, logged with the
// path). The dump is written on a goroutine of its own and dump waits for it at most
// dumpWait: when the calling goroutine holds a ring's lock (mu), the dump is written
// once the call that holds it returns.
func (c *Communicator) dump(why string) {
	if c.rec == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path, err := c.rec.WriteFile()
		if err != nil {
			c.cfg.Log.Error("comm: flight recorder dump failed", "rank", c.rank, "reason", why, "err", err)
			return
		}
		c.cfg.Log.Warn("comm: flight recorder dumped", "rank", c.rank, "reason", why, "path", path)
	}()
	t := time.NewTimer(dumpWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.cfg.Log.Debug("comm: flight recorder dump waits for the communicator's lock", "rank", c.rank, "reason", why)
	}
}

// frType is flightrec's name of an NCCL data type (NCCL's numbering plus one).
func frType(dt gpulib.DataType) flightrec.DType {
	if dt < 0 || dt > gpulib.Float8e5m2 {
		return flightrec.NoType
	}
	return flightrec.DType(dt + 1)
}

// frCall is the record of one NCCL call of n elements of dt. AllGather's n is its
// send count, ReduceScatter's its receive count: world gives the other side.
func frCall(op flightrec.Op, n uint64, dt gpulib.DataType, peer, world int) flightrec.Call {
	in, out := frSizes(op, n, world)
	return flightrec.Call{Op: op, Peer: peer, In: in, Out: out, Type: frType(dt)}
}

// frSizes are the send and receive counts of frCall.
func frSizes(op flightrec.Op, n uint64, world int) (in, out int64) {
	in, out = int64(n), int64(n)
	switch op {
	case flightrec.AllGather:
		out *= int64(world)
	case flightrec.ReduceScatter, flightrec.AllToAll:
		in *= int64(world)
		if op == flightrec.AllToAll {
			out = in
		}
	}
	return in, out
}

// frOps is Communicator.direct while the recorder is on: it records each call, then
// makes it. It is called under the communicator's mu, its ring's lock.
type frOps struct {
	d  gpulib.Driver
	fr *flightrec.Comm
	n  int // the communicator's size
}

func (o frOps) AllReduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.AllReduce, count, dt, 0, 0))
	return o.d.AllReduce(send, recv, count, dt, op, c, s)
}

func (o frOps) Broadcast(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Broadcast, count, dt, 0, 0))
	return o.d.Broadcast(send, recv, count, dt, root, c, s)
}

func (o frOps) AllGather(send, recv gpulib.Ptr, sendCount uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.AllGather, sendCount, dt, 0, o.n))
	return o.d.AllGather(send, recv, sendCount, dt, c, s)
}

func (o frOps) ReduceScatter(send, recv gpulib.Ptr, recvCount uint64, dt gpulib.DataType, op gpulib.RedOp, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.ReduceScatter, recvCount, dt, 0, o.n))
	return o.d.ReduceScatter(send, recv, recvCount, dt, op, c, s)
}

func (o frOps) Reduce(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, op gpulib.RedOp, root int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Reduce, count, dt, 0, 0))
	return o.d.Reduce(send, recv, count, dt, op, root, c, s)
}

func (o frOps) AlltoAll(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.AllToAll, count, dt, 0, o.n))
	return o.d.AlltoAll(send, recv, count, dt, c, s)
}

func (o frOps) Gather(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Gather, count, dt, 0, 0))
	return o.d.Gather(send, recv, count, dt, root, c, s)
}

func (o frOps) Scatter(send, recv gpulib.Ptr, count uint64, dt gpulib.DataType, root int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Scatter, count, dt, 0, 0))
	return o.d.Scatter(send, recv, count, dt, root, c, s)
}

func (o frOps) Send(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Send, count, dt, peer, 0))
	return o.d.Send(buf, count, dt, peer, c, s)
}

func (o frOps) Recv(buf gpulib.Ptr, count uint64, dt gpulib.DataType, peer int, c gpulib.Comm, s gpulib.Stream) error {
	o.fr.Record(frCall(flightrec.Recv, count, dt, peer, 0))
	return o.d.Recv(buf, count, dt, peer, c, s)
}

// DumpOnStoreKey writes the flight recorder's dump each time an operator sets the next
// key of <key>/1, <key>/2, ... in the store s, checking every interval (0:
// flightrec.DefaultKeyInterval), until Close (flightrec.Recorder.DumpOnKey). It does
// nothing while the recorder is off. Job.NewNCCL (comm/job) calls it with the job's
// store and job.DumpKey.
func (b *Backend) DumpOnStoreKey(s flightrec.KeyChecker, key string, interval time.Duration) {
	c := b.conn()
	if c.rec == nil || s == nil {
		return
	}
	c.rec.DumpOnKey(c.closing(), s, key, interval, c.cfg.Log)
}
