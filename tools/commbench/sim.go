package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
	"github.com/ncclgo/ncclgo/comm/nccl"
)

// simRank is one rank of a commtest cluster: comm's NCCL backend on a simulated device.
type simRank struct {
	c    *commtest.Cluster
	rank int
	comm comm.Communicator
	// stream is the rank's stream of its own for -G: captures record on it, and the
	// graphs are launched on it.
	stream comm.Stream
}

func (r *simRank) Comm() comm.Communicator { return r.comm }

func (r *simRank) Alloc(bytes int64) (comm.DevicePtr, error) { return r.c.Alloc(r.rank, int(bytes)) }

func (r *simRank) Free(p comm.DevicePtr) error { return r.c.Free(r.rank, p) }

func (r *simRank) Write(p comm.DevicePtr, data []byte) error { return r.c.Write(r.rank, p, data) }

func (r *simRank) Read(p comm.DevicePtr, n int64) ([]byte, error) {
	return r.c.Read(r.rank, p, int(n))
}

// Capture records what record issues, on the rank's stream, into a graph of the
// simulated device (commtest's model of CUDA's global capture mode).
func (r *simRank) Capture(record func(c comm.Communicator) error) (graph, error) {
	nc, ok := r.comm.(*nccl.Communicator)
	if !ok {
		return nil, fmt.Errorf("rank %d: %T has no stream to capture on", r.rank, r.comm)
	}
	v, err := nc.OnStream(r.stream)
	if err != nil {
		return nil, err
	}
	if err := r.c.BeginCapture(r.rank, r.stream); err != nil {
		return nil, err
	}
	recErr := record(v)
	g, err := r.c.EndCapture(r.rank, r.stream)
	if err = errors.Join(recErr, err); err != nil {
		if g != nil {
			err = errors.Join(err, g.Destroy())
		}
		return nil, err
	}
	return simGraph{g: g, v: v}, nil
}

// simGraph is a graph of a simulated device and the view of the stream it replays on.
type simGraph struct {
	g *commtest.Graph
	v nccl.StreamComm
}

func (g simGraph) Launch() error { return g.g.Launch(g.v.Stream()) }

func (g simGraph) Wait(ctx context.Context) error { return g.v.Sync(ctx) }

func (g simGraph) Destroy() error { return g.g.Destroy() }

// openSim starts n ranks of comm's NCCL backend on commtest's simulator.
func openSim(_ context.Context, n int) (*world, error) {
	c, err := commtest.NewCluster(n, commtest.WithElementType(comm.BFloat16))
	if err != nil {
		return nil, fmt.Errorf("-sim %d: %w", n, err)
	}
	w := &world{simulated: true, close: c.Close}
	host, _ := os.Hostname()
	for i, cm := range c.Communicators() {
		s, err := c.NewStream(i)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("-sim %d: rank %d: creating a stream: %w", n, i, err), c.Close())
		}
		w.ranks = append(w.ranks, &simRank{c: c, rank: i, comm: cm, stream: s})
		w.devices = append(w.devices, fmt.Sprintf("Rank %2d Group  0 Pid %6d on %10s device %2d [simulated] host memory (comm/commtest)",
			i, os.Getpid(), host, i))
	}
	return w, nil
}
