package commtest

import "github.com/ncclgo/ncclgo/comm/commtest/internal/sim"

// Machine describes the simulated machine NCCL's device API reports
// (nccl.Communicator.Properties, the teams, NewDevComm): which devices share a node (an
// NVLink domain: NCCL's LSA team), and what the fabric offers. Rank r runs on device r.
// The zero value is one node holding every device, with the device API and without
// multicast memory, GPU-initiated networking (GIN) or host RMA.
//
//   - GPUsPerNode: how many consecutive devices form a node; 0 puts all on one node.
//   - NoDeviceAPI: communicators lack symmetric memory support (Properties.DeviceAPI
//     false); NewDevComm fails with ncclInvalidUsage, as NCCL does.
//   - Multimem: NVLink SHARP multicast memory (Properties.Multimem).
//   - GinType: int(nccl.GINProxy) or int(nccl.GINGDAKI) offers GIN across all ranks;
//     with GinRailOnly only along the rails (Properties.RailedGIN).
//   - HostRMA: Properties.HostRMA.
type Machine = sim.Machine

// WithMachine sets the simulated machine (default: the zero Machine).
func WithMachine(m Machine) Option {
	return func(c *clusterConfig) { c.sim = append(c.sim, sim.WithMachine(m)) }
}
