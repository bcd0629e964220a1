package mpi

import (
	"runtime"
	"strconv"
	"unsafe"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
)

// The flight recorder (package flightrec) of the MPI communicators: one Recorder per
// communicator made by New (its world), shared by the communicators split from it.
// MPI's calls are blocking, so the rings are Blocking: Record alone notes an
// operation as started and the one before it as completed (one lock). Operations are
// recorded under the backend name "gloo": torch's fr_trace accepts only the names of
// its own backends (nccl, ncclx, xccl, gloo, rccl, rcclx, mccl, hccl), and gloo is its
// host-memory backend, the closest to MPI's; the dump's pg_config names the
// communicator "mpi:..." so that an operator tells the two apart.

// frOption is WithFlightRecorder's setting.
type frOption struct {
	set bool
	n   int
}

// frState is a communicator's flight recorder: the process's recorder, whether this
// communicator closes it, its own ring, its name and members' world ranks, and how
// many splits it made. All zero while the recorder is off.
type frState struct {
	rec    *flightrec.Recorder
	owns   bool
	ring   *flightrec.Comm
	name   string
	splits int
	last   flightrec.ID // the id of the operation recorded last, under c.mu
}

// WithFlightRecorder sets how many operations the flight recorder keeps per
// communicator (0 turns it off). Without the option the recorder is off unless the
// environment sets a size (NCCLGO_FR_BUFFER_SIZE, TORCH_FR_BUFFER_SIZE or
// TORCH_NCCL_TRACE_BUFFER_SIZE; the dump's path from NCCLGO_FR_DUMP_FILE and
// PyTorch's variables: see package flightrec). The option wins over the environment.
func WithFlightRecorder(n int) Option {
	return func(o *options) { o.fr = frOption{set: n >= 0, n: max(n, 0)} }
}

// FlightRecorder returns the communicator's flight recorder, nil when it is off: Dump
// and WriteFile write its dump on demand, DumpOnSignal on a signal.
func (c *Communicator) FlightRecorder() *flightrec.Recorder { return c.fr.rec }

// startRecorder makes the recorder of a world communicator (rank is its MPI world
// rank) and registers c.
func (c *Communicator) startRecorder() {
	cfg, err := flightrec.ConfigFromEnv(flightrec.Config{LibVersion: "mpi"})
	if err != nil {
		c.cfg.log.Warn("comm: flight recorder off", "rank", c.rank, "err", err)
		return
	}
	if c.cfg.fr.set {
		cfg.Entries = c.cfg.fr.n
	}
	rec, err := flightrec.New(cfg, c.rank)
	if err != nil || rec == nil {
		if err != nil {
			c.cfg.log.Warn("comm: flight recorder off", "rank", c.rank, "err", err)
		}
		return
	}
	ranks := make([]int, c.world)
	for i := range ranks {
		ranks[i] = i
	}
	c.fr.rec, c.fr.owns = rec, true
	c.register("mpi:0", "default_pg", 0, ranks)
}

func (c *Communicator) register(name, desc string, id int, ranks []int) {
	ring, err := c.fr.rec.Comm(flightrec.Group{Name: name, Desc: desc, ID: id, Ranks: ranks, Backend: "gloo", Blocking: true})
	if err != nil {
		c.cfg.log.Warn("comm: flight recorder: communicator not recorded", "rank", c.rank, "err", err)
		return
	}
	c.fr.ring, c.fr.name = ring, name
}

// splitRecorder registers child, split from c, in c's recorder: the members' world
// ranks come from an all-gather on the child (every member is in Split).
func (c *Communicator) splitRecorder(child *Communicator) {
	if c.fr.ring == nil {
		return
	}
	mine := []int32{int32(c.fr.rec.Rank())}
	ranks := make([]int32, child.world)
	err := child.AllGather(comm.DevicePtr(uintptr(unsafe.Pointer(&mine[0]))), comm.DevicePtr(uintptr(unsafe.Pointer(&ranks[0]))), 1, comm.Int32)
	runtime.KeepAlive(mine)
	runtime.KeepAlive(ranks)
	if err != nil {
		c.cfg.log.Warn("comm: flight recorder: split not recorded", "rank", c.rank, "err", err)
		return
	}
	global := make([]int, len(ranks))
	for i, r := range ranks {
		global[i] = int(r)
	}
	c.fr.splits++
	child.fr.rec = c.fr.rec
	child.register(c.fr.name+":split"+strconv.Itoa(c.fr.splits), "split", c.fr.splits, global)
}

// record notes an operation of count elements of t (AllGather's and ReduceScatter's
// count is the per-rank part) with peer (Send, Recv); c.mu is held.
func (c *Communicator) record(op flightrec.Op, count int, t comm.DType, peer int) {
	if c.fr.ring == nil {
		return
	}
	in, out := int64(count), int64(count)
	switch op {
	case flightrec.AllGather:
		out *= int64(c.world)
	case flightrec.ReduceScatter:
		in *= int64(c.world)
	}
	c.fr.last = c.fr.ring.Record(flightrec.Call{Op: op, Peer: peer, In: in, Out: out, Type: flightrec.DType(t + 1)})
}

// recorded notes that the blocking operation recorded last returned: it completed
// (without a lock: applied by the next record or the dump); c.mu is held.
func (c *Communicator) recorded() {
	if c.fr.ring != nil {
		c.fr.ring.CompletedLater(c.fr.last)
	}
}

// closeRecorder closes the recorder with the world communicator, after writing the
// dump when Close failed.
func (c *Communicator) closeRecorder(failed error) {
	if failed != nil && c.fr.rec != nil {
		if path, err := c.fr.rec.WriteFile(); err == nil {
			c.cfg.log.Warn("comm: flight recorder dumped", "rank", c.rank, "reason", "close after a failure", "path", path)
		}
	}
	if c.fr.owns {
		c.fr.rec.Close()
	}
}

// p2pOp is the recorded operation of a send (true) or receive.
func p2pOp(send bool) flightrec.Op {
	if send {
		return flightrec.Send
	}
	return flightrec.Recv
}
