package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/mpi"
)

// mpiRank is this process's rank of an mpirun job: comm's MPI Communicator on pinned
// host memory.
type mpiRank struct {
	c   *mpi.Communicator
	mem *commtest.HostMemory
}

func (r mpiRank) Comm() comm.Communicator { return r.c }

func (r mpiRank) Alloc(bytes int64) (comm.DevicePtr, error) { return r.mem.Alloc(0, int(bytes)) }

func (r mpiRank) Free(p comm.DevicePtr) error { return r.mem.Free(0, p) }

func (r mpiRank) Write(p comm.DevicePtr, data []byte) error { return r.mem.Write(0, p, data) }

func (r mpiRank) Read(p comm.DevicePtr, n int64) ([]byte, error) { return r.mem.Read(0, p, int(n)) }

// deviceLine is the width of one rank's line in the gathered header.
const deviceLine = 160

// openMPI joins the mpirun job (-mpi): one rank per process, as nccl-tests' MPI mode.
// Every rank's device line is gathered so that rank 0 prints them all, and the times
// (combined as -a says) and wrong-element counts are reduced over the ranks with the
// communicator itself; -z 1's barrier is the communicator's Barrier. Each rank
// runs with GOMAXPROCS of at least 2 (comm.WithMinGOMAXPROCS): mpirun binds a rank to
// one core, and with one P Go's scheduler takes it from every long MPI call.
func openMPI(ctx context.Context) (*world, error) {
	c, err := mpi.New(ctx, mpi.WithMinGOMAXPROCS(2))
	if err != nil {
		return nil, fmt.Errorf("-mpi: %w", err)
	}
	r := mpiRank{c: c, mem: commtest.NewHostMemory()}
	w := &world{ranks: []rank{r}, size: c.WorldSize(), ids: []int{c.Rank()}, quiet: c.Rank() != 0, close: c.Close}
	host, _ := os.Hostname()
	line := fmt.Sprintf("Rank %2d Group  0 Pid %6d on %10s device  - [host] host memory (MPI, mpi.Communicator)",
		c.Rank(), os.Getpid(), host)
	if w.devices, err = gatherLines(ctx, r, line, c.WorldSize()); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("-mpi: gathering the ranks' lines: %w", err)
	}
	w.reduce = func(v []float64, op comm.ReduceOp) error { return reduceOverRanks(ctx, r, v, op) }
	w.barrier = r.c.Barrier
	return w, nil
}

// gatherLines all-gathers one fixed-width line per rank.
func gatherLines(ctx context.Context, r mpiRank, line string, n int) ([]string, error) {
	send, err := r.Alloc(deviceLine)
	if err != nil {
		return nil, err
	}
	defer r.Free(send)
	recv, err := r.Alloc(int64(deviceLine * n))
	if err != nil {
		return nil, err
	}
	defer r.Free(recv)
	b := make([]byte, deviceLine)
	copy(b, line)
	if err := r.Write(send, b); err != nil {
		return nil, err
	}
	if err := r.c.AllGather(send, recv, deviceLine, comm.Uint8); err != nil {
		return nil, err
	}
	if err := r.c.Sync(ctx); err != nil {
		return nil, err
	}
	all, err := r.Read(recv, int64(deviceLine*n))
	if err != nil {
		return nil, err
	}
	lines := make([]string, n)
	for i := range lines {
		lines[i] = string(bytes.TrimRight(all[i*deviceLine:(i+1)*deviceLine], "\x00"))
	}
	return lines, nil
}

// reduceOverRanks combines v element by element over the ranks with op, in place
// (float64 all-reduce).
func reduceOverRanks(ctx context.Context, r mpiRank, v []float64, op comm.ReduceOp) error {
	p, err := r.Alloc(int64(8 * len(v)))
	if err != nil {
		return err
	}
	defer r.Free(p)
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	if err := r.Write(p, b); err != nil {
		return err
	}
	if err := r.c.AllReduce(p, len(v), comm.Float64, op); err != nil {
		return err
	}
	if err := r.c.Sync(ctx); err != nil {
		return err
	}
	if b, err = r.Read(p, int64(8*len(v))); err != nil {
		return err
	}
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}
