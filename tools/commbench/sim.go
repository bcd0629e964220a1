package main

import (
	"context"
	"fmt"
	"os"

	"github.com/ncclgo/ncclgo/comm"
	"github.com/ncclgo/ncclgo/comm/commtest"
)

// simRank is one rank of a commtest cluster: comm's NCCL backend on a simulated device.
type simRank struct {
	c    *commtest.Cluster
	rank int
	comm comm.Communicator
}

func (r simRank) Comm() comm.Communicator { return r.comm }

func (r simRank) Alloc(bytes int64) (comm.DevicePtr, error) { return r.c.Alloc(r.rank, int(bytes)) }

func (r simRank) Free(p comm.DevicePtr) error { return r.c.Free(r.rank, p) }

func (r simRank) Write(p comm.DevicePtr, data []byte) error { return r.c.Write(r.rank, p, data) }

func (r simRank) Read(p comm.DevicePtr, n int64) ([]byte, error) { return r.c.Read(r.rank, p, int(n)) }

// openSim starts n ranks of comm's NCCL backend on commtest's simulator.
func openSim(_ context.Context, n int) (*world, error) {
	c, err := commtest.NewCluster(n)
	if err != nil {
		return nil, fmt.Errorf("-sim %d: %w", n, err)
	}
	w := &world{simulated: true, close: c.Close}
	host, _ := os.Hostname()
	for i, cm := range c.Communicators() {
		w.ranks = append(w.ranks, simRank{c: c, rank: i, comm: cm})
		w.devices = append(w.devices, fmt.Sprintf("Rank %2d Group  0 Pid %6d on %10s device %2d [simulated] host memory (comm/commtest)",
			i, os.Getpid(), host, i))
	}
	return w, nil
}
