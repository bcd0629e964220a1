package mpi

import (
	"fmt"
	"strconv"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/flightrec"
	"github.com/ncclgo/ncclgo/raw/mpi"
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
// communicator closes it, its own ring, its name and members' world ranks (all zero
// while the recorder is off), and how many splits it made (counted by every rank,
// with a child or not, so that the children's names agree).
type frState struct {
	rec    *flightrec.Recorder
	owns   bool
	ring   *flightrec.Comm
	name   string
	splits int
	last   flightrec.ID // the id of the operation recorded last, under c.mu
}

// WithFlightRecorder sets how many operations the flight recorder keeps per
// communicator; 0 turns it off. The recorder is on by default, with
// flightrec.DefaultEntries (512) entries per communicator, unless the environment sets
// a size (NCCLGO_FR_BUFFER_SIZE, TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE;
// 0 turns it off; the dump's path from NCCLGO_FR_DUMP_FILE and PyTorch's variables:
// see package flightrec). The option wins over the environment; a negative n is the
// default.
func WithFlightRecorder(n int) Option {
	return func(o *options) { o.fr = frOption{set: n >= 0, n: max(n, 0)} }
}

// FlightRecorder returns the communicator's flight recorder, nil when it is off: Dump
// and WriteFile write its dump on demand, DumpOnSignal on a signal.
func (c *Communicator) FlightRecorder() *flightrec.Recorder { return c.fr.rec }

// startRecorder makes the recorder of a world communicator (rank is its MPI world
// rank) and registers c.
func (c *Communicator) startRecorder() {
	// On by default (flightrec.DefaultEntries); the environment, then the option, may
	// turn it off.
	cfg, err := flightrec.ConfigFromEnv(flightrec.Config{Entries: flightrec.DefaultEntries, LibVersion: "mpi"})
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

// splitRecorder registers child, made by c's n-th split, in c's recorder, with its
// members' world ranks (worldRanks: a local query, so that ranks recording and ranks
// not recording make the same MPI calls on the child). A failed query is logged and
// leaves the child unrecorded.
func (c *Communicator) splitRecorder(child *Communicator, n int) {
	if c.fr.ring == nil {
		return
	}
	global, err := child.worldRanks()
	if err != nil {
		c.cfg.log.Warn("comm: flight recorder: split not recorded", "rank", c.rank, "err", err)
		return
	}
	child.fr.rec = c.fr.rec
	child.register(c.fr.name+":split"+strconv.Itoa(n), "split", n, global)
}

// worldRanks returns the MPI_COMM_WORLD rank of each member of c, in c's rank order
// (MPI_Comm_group, MPI_Group_translate_ranks: no communication).
func (c *Communicator) worldRanks() ([]int, error) {
	world, err := mpi.CommWorld()
	if err != nil {
		return nil, err
	}
	in, out := make([]int32, c.world), make([]int32, c.world)
	for i := range in {
		in[i] = int32(i)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var g, wg mpi.Group
	if err := mpi.CommGroup(c.comm, &g); err != nil {
		return nil, err
	}
	defer mpi.GroupFree(&g)
	if err := mpi.CommGroup(world, &wg); err != nil {
		return nil, err
	}
	defer mpi.GroupFree(&wg)
	if err := mpi.GroupTranslateRanks(g, int32(c.world), &in[0], wg, &out[0]); err != nil {
		return nil, err
	}
	ranks := make([]int, c.world)
	for i, r := range out {
		if r < 0 {
			return nil, fmt.Errorf("member %d is not in MPI_COMM_WORLD (%d)", i, r)
		}
		ranks[i] = int(r)
	}
	return ranks, nil
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
